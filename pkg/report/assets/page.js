// kwatch report: draws the timeline, the event view, the tables and the
// health charts from the JSON data embedded in the page. Text from the
// capture is only ever set as textContent, never parsed as HTML.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("data").textContent);
  var SVG = "http://www.w3.org/2000/svg";
  var TYPES = ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "other"];
  var LABEL_W = 260, LANE_H = 24, AXIS_H = 22, MARK_W = 3;
  var lanes = D.lanes;
  // Notes by the lane they belong to, and by connection for those of a
  // whole connection (drawn on each of its lanes).
  var notesOfLane = {}, notesOfConn = {};
  D.notes.forEach(function (n) {
    var m = n.l >= 0 ? notesOfLane : notesOfConn, k = n.l >= 0 ? n.l : n.c;
    (m[k] = m[k] || []).push(n);
  });
  var span = Math.max(D.span, 1);
  var state = { from: 0, to: span * 1.02, brush: null, chosen: -1, quiet: 30 };
  var drag = null;
  var NOTE_STROKE = { rst_stream: "#d33", reset: "#d00", problem: "#d00", warning: "#e80", relist: "#06c", conn: "#777" };

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function sv(tag, attrs, parent) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function titled(e, text) { var t = sv("title", {}, e); t.textContent = text; return e; }
  function fmtT(ms) {
    if (ms === null || ms === undefined) return "";
    var s = ms / 1000;
    if (span < 10000) return "+" + s.toFixed(3) + " s";
    if (span < 600000) return "+" + s.toFixed(1) + " s";
    var m = Math.floor(s / 60);
    return "+" + m + "m" + (s - 60 * m).toFixed(0).padStart(2, "0") + "s";
  }
  function bytes(n) { return n === 1 ? "1 byte" : n + " bytes"; }
  function fmtMs(ms) { return ms === null || ms === undefined ? "" : "+" + (ms / 1000).toFixed(3) + " s"; }
  function absT(ms) {
    if (!D.t0) return fmtT(ms);
    var d = new Date(Date.parse(D.t0) + ms);
    return d.toISOString().replace("T", " ").replace("Z", " UTC");
  }
  function laneName(l) { return l.label; }
  // "configmaps in kube-system", "deployments.apps (all namespaces)"
  function shortPath(path) {
    if (!path) return "(request not captured)";
    var seg = path.split("/").filter(function (s) { return s; });
    var group = seg[0] === "apis" && seg.length > 2 ? seg[1] : "";
    seg = seg.slice(seg[0] === "apis" ? 3 : 2);
    if (seg[0] === "watch") seg = seg.slice(1); // the deprecated /watch/ paths
    var ns = "";
    if (seg[0] === "namespaces" && seg.length > 2) { ns = seg[1]; seg = seg.slice(2); }
    var s = seg.join("/") + (group ? "." + group : "");
    if (ns) s += " in " + (ns.length > 18 ? ns.slice(0, 17) + "…" : ns);
    return s.length > 44 ? s.slice(0, 43) + "…" : s;
  }
  function laneTitle(l) {
    var lines = [laneName(l) + "  " + (l.target || l.path || "(request not captured)")];
    if (l.who) lines.push("client " + l.who);
    if (l.client) lines.push("connection " + l.client + " → " + l.server);
    if (l.ua) lines.push("User-Agent: " + l.ua);
    if (l.reason) lines.push("opened: " + l.reason + (l.after ? " after " + l.after : ""));
    if (l.how) lines.push("ended: " + l.how);
    if (l.closed) lines.push("connection: " + l.closed);
    return lines.join("\n");
  }
  function eventLine(ev) {
    var l = D.lanes[ev.l];
    return ev.ts + " " + laneName(l) + " " + String(ev.s).padStart(3) + " " + ev.ty.padEnd(8) + "  " + ev.w + "  " + ev.c;
  }
  function markLine(l, m) {
    if (m[3] >= 0) return eventLine(D.events[m[3]]);
    return absT(m[0]) + " " + laneName(l) + " " + TYPES[m[1]] + " (its bytes were not kept: past the detail budget the report keeps those of events spread over the capture)";
  }

  // Header
  document.getElementById("title").textContent = D.title || "kwatch report";
  document.getElementById("summary").textContent = D.summary + (D.t0 ? " · from " + absT(0) + " for " + (span / 1000).toFixed(3) + " s" : "");
  document.getElementById("overall").textContent = D.health ? "health: " + D.health : "";
  var caveats = document.getElementById("caveats");
  function caveat(t) { caveats.appendChild(el("li", {}, t)); }
  var denseN = lanes.filter(function (l) { return l.dense; }).length;
  if (denseN) caveat(denseN + " watches have more events than the report draws one by one (" + D.maxLaneMarks + " per watch, " + D.dropped.marks + " events in all): they are drawn as density, events per time bin; their first events keep their marks.");
  if (D.dropped.lanes) caveat(D.dropped.lanes + " more watches are neither drawn nor listed (the report keeps the first " + lanes.length + "); their " + D.dropped.events.reduce(function (a, b) { return a + b; }, 0) + " events are counted in the summary only.");
  if (D.dropped.details) caveat(D.dropped.details + " events keep their mark but not their bytes and object: past the report's detail budget it keeps those of events spread evenly over the capture (kwatch pcap -o json has them all).");
  if (D.dropped.notes) caveat(D.dropped.notes + " notes and problems are not drawn (too many).");
  if (!lanes.length) caveat("No watch in this " + (D.live ? "session" : "capture") + ".");

  var legend = document.getElementById("legend");
  TYPES.forEach(function (t) { var s = el("span"); var i = el("i", { "class": "t-" + t }); s.appendChild(i); s.appendChild(document.createTextNode(t)); legend.appendChild(s); });
  // The other glyphs, drawn as on the timeline.
  [["initial-events-end bookmark", "initial-end"], ["ERROR 410", "expired"], ["quiet gap", "quiet"], ["PING", "ping"], ["RST_STREAM", "rst_stream"],
   ["GOAWAY", "goaway"], ["flow-control stall (HTTP/2, TCP zero window)", "stall"], ["TCP reset", "reset"], ["connection closed", "closed"], ["problem", "problem"], ["warning", "warning"], ["re-list", "relist"]].forEach(function (p) {
    var span = el("span"), g = document.createElementNS(SVG, "svg");
    g.setAttribute("width", 12); g.setAttribute("height", 14); g.style.verticalAlign = "middle"; g.style.marginRight = "3px";
    glyph(g, p[1], 6, 0, 14);
    span.appendChild(g); span.appendChild(document.createTextNode(p[0])); legend.appendChild(span);
  });

  // Timeline
  var svg = document.getElementById("timeline");
  var tip = document.getElementById("tooltip");
  // The plot's width is read once per drawing: reading clientWidth after
  // each change of the SVG would lay the page out again every time.
  var plotWidth = 0;
  function measure() { plotWidth = Math.max(200, (svg.clientWidth || 1000) - LABEL_W - 10); }
  function plotW() { return plotWidth; }
  function x(ms) { return LABEL_W + (ms - state.from) / (state.to - state.from) * plotW(); }
  function msAt(px) { return state.from + (px - LABEL_W) / plotW() * (state.to - state.from); }
  function visible(ms) { return ms >= state.from && ms <= state.to; }

  function ticks() {
    var range = state.to - state.from, target = plotW() / 110;
    var steps = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000, 120000, 300000, 600000, 900000, 1800000, 3600000, 7200000, 21600000, 43200000, 86400000];
    var step = steps[steps.length - 1];
    for (var i = 0; i < steps.length; i++) if (range / steps[i] <= target) { step = steps[i]; break; }
    var out = [];
    for (var t = Math.ceil(state.from / step) * step; t <= state.to && out.length < 200; t += step) out.push(t);
    return out;
  }

  function draw() {
    measure();
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var w = svg.clientWidth || 1000, h = AXIS_H + lanes.length * LANE_H + 6;
    svg.setAttribute("height", h);
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    var axis = sv("g", { "class": "axis" }, svg);
    ticks().forEach(function (t) {
      var px = x(t);
      sv("line", { x1: px, x2: px, y1: AXIS_H - 4, y2: h }, axis);
      sv("text", { x: px + 2, y: 12 }, axis).textContent = fmtT(t);
    });
    var defs = sv("defs", {}, svg);
    sv("rect", { x: LABEL_W, y: 0, width: plotW(), height: h }, sv("clipPath", { id: "plot-clip" }, defs));
    sv("rect", { x: 0, y: 0, width: LABEL_W - 6, height: h }, sv("clipPath", { id: "label-clip" }, defs));
    var quietMs = state.quiet > 0 ? state.quiet * 1000 : 0;
    var drawnMarks = 0, denseDrawn = 0;
    lanes.forEach(function (l, row) {
      var y = AXIS_H + row * LANE_H;
      var g = sv("g", { "class": "lane", "data-lane": l.i, "data-marks": l.m.length }, svg);
      sv("rect", { "class": "lane-bg", x: 0, y: y + 1, width: w, height: LANE_H - 2 }, g);
      var label = sv("text", { x: 4, y: y + 16, "clip-path": "url(#label-clip)" }, g);
      label.textContent = laneName(l) + "  " + shortPath(l.path);
      titled(label, laneTitle(l));
      var plot = sv("g", { "clip-path": "url(#plot-clip)" }, g);
      var end = l.end !== null ? l.end : span;
      titled(sv("line", { "class": "lane-life" + (l.end !== null && !l.clean && !l.byClient ? " unclean" : ""), x1: x(l.start), x2: x(end), y1: y + 12, y2: y + 12 }, plot), laneTitle(l));
      if (l.end !== null) {
        titled(sv("rect", { "class": "lane-end" + (l.clean || l.byClient ? "" : " unclean"), x: x(l.end) - 1, y: y + 4, width: 2, height: LANE_H - 8 }, plot), fmtT(l.end) + "  ended: " + l.how);
      }
      // quiet gaps: no event for longer than the threshold while the watch was open
      if (quietMs > 0) {
        var times = [l.start];
        if (l.dense) l.bins.forEach(function (b) { times.push(b[0]); times.push(b[0] + l.binW); });
        else l.m.forEach(function (m) { times.push(m[0]); });
        times.push(end);
        times.sort(function (a, b) { return a - b; });
        for (var i = 1; i < times.length; i++) {
          if (times[i] - times[i - 1] > quietMs) {
            titled(sv("rect", { "class": "quiet", x: x(times[i - 1]), y: y + 3, width: Math.max(1, x(times[i]) - x(times[i - 1])), height: LANE_H - 6 }, plot),
              "quiet for " + ((times[i] - times[i - 1]) / 1000).toFixed(1) + " s: " + fmtT(times[i - 1]) + " to " + fmtT(times[i]));
          }
        }
      }
      // resumes and re-lists: a dashed line from the watch before
      if (l.link) {
        var parts = l.link.split("|"), prev = D.lanes[+parts[0]];
        var prow = prev ? lanes.indexOf(prev) : -1;
        if (prow >= 0 && prev.end !== null) {
          var py = AXIS_H + prow * LANE_H + 12;
          titled(sv("path", { "class": "link", "data-kind": parts[1], d: "M" + x(prev.end) + " " + py + " L" + x(l.start) + " " + (y + 12) }, plot), parts[1] + " after " + laneName(prev) + (parts[2] ? " (" + parts.slice(2).join("|") + ")" : ""));
        }
      }
      var visibleMarks = l.m.filter(function (m) { return visible(m[0]); });
      if (l.dense || visibleMarks.length > plotW() / 2) {
        denseDrawn++;
        var max = 1;
        l.bins.forEach(function (b) { var n = 0; for (var k = 1; k <= 6; k++) n += b[k]; if (n > max) max = n; });
        // One path per event type: a rectangle per bin, stacked by type.
        var d = ["", "", "", "", "", ""], shown = [0, 0, 0, 0, 0, 0];
        l.bins.forEach(function (b) {
          if (b[0] + l.binW < state.from || b[0] > state.to) return;
          var top = 0, bx = x(b[0]), bw = Math.max(1, x(b[0] + l.binW) - bx);
          for (var t = 0; t < 6; t++) {
            if (!b[t + 1]) continue;
            var hh = Math.max((LANE_H - 6) * b[t + 1] / max, 0.5);
            d[t] += "M" + bx.toFixed(1) + " " + (y + LANE_H - 3 - top - hh).toFixed(1) + "h" + bw.toFixed(1) + "v" + hh.toFixed(1) + "h" + (-bw).toFixed(1) + "z";
            top += hh;
            shown[t] += b[t + 1];
          }
        });
        for (var t = 0; t < 6; t++) {
          if (!d[t]) continue;
          titled(sv("path", { "class": "density t-" + TYPES[t], d: d[t] }, plot), shown[t] + " " + TYPES[t] + " events in view, drawn as density (bins of " + l.binW + " ms; the tallest holds " + max + " events)");
        }
        // Over the density: the marks kept (a dense lane's first events)
        // while they fit, and always the ERROR and initial-events-end ones.
        if (visibleMarks.length > plotW() / 2) visibleMarks = visibleMarks.filter(function (m) { return m[2] & 5 || m[1] === 4; });
      }
      visibleMarks.forEach(function (m) {
        var cls = "mark t-" + TYPES[m[1]] + (m[2] & 1 ? " initial-end" : "") + (m[2] & 4 ? " expired" : "") + (m[3] >= 0 && m[3] === state.chosen ? " chosen" : "");
        var big = m[2] & 5 || m[1] === 4;
        var r = sv("rect", { "class": cls, x: x(m[0]) - MARK_W / 2, y: y + (big ? 2 : 5), width: MARK_W, height: big ? LANE_H - 4 : LANE_H - 10, "data-ev": m[3], "data-lane": l.i, "data-t": m[0] }, plot);
        r.addEventListener("mouseenter", function (e) { showTip(e, markLine(l, m)); });
        r.addEventListener("mouseleave", hideTip);
        r.addEventListener("click", function (e) { e.stopPropagation(); if (m[3] >= 0) choose(m[3]); });
        drawnMarks++;
      });
      // notes of this watch, and of its connection
      // At most one glyph per kind and 3 pixels: a connection with 10 000
      // PINGs draws a row of them, not 10 000.
      var seen = {};
      (notesOfLane[l.i] || []).concat(notesOfConn[l.conn] || []).forEach(function (n) {
        if (!visible(n.t)) return;
        var col = n.k + Math.round(x(n.t) / 3);
        if (seen[col]) return;
        seen[col] = true;
        var shape = glyph(plot, n.k, x(n.t), y, LANE_H);
        shape.setAttribute("data-kind", n.k);
        shape.addEventListener("mouseenter", function (e) { showTip(e, fmtT(n.t) + "  " + n.x); });
        shape.addEventListener("mouseleave", hideTip);
      });
    });
    if (state.brush) {
      var b0 = x(state.brush[0]), b1 = x(state.brush[1]);
      sv("rect", { "class": "brush", x: Math.min(b0, b1), y: AXIS_H, width: Math.max(1, Math.abs(b1 - b0)), height: h - AXIS_H }, svg);
    }
    svg.setAttribute("data-drawn-marks", drawnMarks);
    svg.setAttribute("data-dense-lanes", denseDrawn);
    document.getElementById("range").textContent = "visible: " + fmtT(state.from) + " to " + fmtT(state.to);
    document.getElementById("range").setAttribute("data-from", state.from);
    document.getElementById("range").setAttribute("data-to", state.to);
  }

  // glyph draws a note of kind k at x in a lane from y of height h, or a
  // legend swatch; it returns the element.
  function glyph(parent, k, nx, y, h) {
    var shape, ny = y + h - 4;
    switch (k) {
      case "ping": shape = sv("circle", { cx: nx, cy: y + 5, r: 2.5 }, parent); break;
      case "goaway": shape = sv("rect", { x: nx - 3, y: y + 2, width: 6, height: 6 }, parent); break;
      case "stall": shape = sv("path", { d: "M" + (nx - 4) + " " + ny + " L" + nx + " " + (ny - 7) + " L" + (nx + 4) + " " + ny + " Z" }, parent); break;
      case "closed": case "capture-ended": shape = sv("rect", { x: nx - 1, y: y + 2, width: 2, height: h - 4 }, parent); break;
      case "problem": case "warning": shape = sv("path", { d: "M" + nx + " " + (y + 1) + " l4 5 l-4 5 l-4 -5 z" }, parent); break;
      case "initial-end": shape = sv("rect", { x: nx - 1.5, y: y + 1, width: 3, height: h - 2, "class": "mark t-BOOKMARK initial-end" }, parent); return shape;
      case "expired": shape = sv("rect", { x: nx - 1.5, y: y + 1, width: 3, height: h - 2, "class": "mark t-ERROR expired" }, parent); return shape;
      case "quiet": shape = sv("rect", { x: nx - 5, y: y + 2, width: 10, height: h - 4, "class": "quiet" }, parent); return shape;
      default: shape = sv("path", { d: "M" + (nx - 4) + " " + (y + 2) + " l8 8 m0 -8 l-8 8", "stroke-width": 2, fill: "none", stroke: NOTE_STROKE[k] || "#d00" }, parent);
    }
    shape.setAttribute("class", "note k-" + k);
    return shape;
  }
  function showTip(e, text) { tip.textContent = text; tip.hidden = false; tip.style.left = (e.clientX + 12) + "px"; tip.style.top = (e.clientY + 12) + "px"; }
  function hideTip() { tip.hidden = true; }

  function zoom(factor, centerMs) {
    var c = centerMs === undefined ? (state.from + state.to) / 2 : centerMs;
    // Between 10 µs and a hundred times the capture's span.
    var range = Math.min(Math.max((state.to - state.from) * factor, 0.01), span * 100);
    factor = range / (state.to - state.from);
    state.from = c - (c - state.from) * factor;
    state.to = state.from + range;
    draw();
  }
  document.getElementById("zoom-in").addEventListener("click", function () { zoom(0.5); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoom(2); });
  document.getElementById("zoom-reset").addEventListener("click", function () { state.from = 0; state.to = span * 1.02; draw(); });
  document.getElementById("quiet").addEventListener("change", function (e) { state.quiet = parseFloat(e.target.value) || 0; draw(); });
  svg.addEventListener("wheel", function (e) {
    var r = svg.getBoundingClientRect(), px = e.clientX - r.left;
    if (px < LABEL_W) return;
    e.preventDefault();
    zoom(e.deltaY > 0 ? 1.25 : 0.8, msAt(px));
  }, { passive: false });
  svg.addEventListener("mousedown", function (e) {
    var r = svg.getBoundingClientRect(), px = e.clientX - r.left;
    if (px < LABEL_W) return;
    drag = { x: px, from: state.from, to: state.to, brush: e.shiftKey, start: msAt(px) };
  });
  window.addEventListener("mousemove", function (e) {
    if (!drag) return;
    var r = svg.getBoundingClientRect(), px = e.clientX - r.left;
    if (drag.brush) { setBrush(drag.start, msAt(px), true); return; }
    var dms = (px - drag.x) / plotW() * (drag.to - drag.from);
    state.from = drag.from - dms; state.to = drag.to - dms;
    draw();
  });
  window.addEventListener("mouseup", function () { if (drag && drag.brush && state.brush) tables(); drag = null; });
  window.addEventListener("resize", draw);

  function setBrush(a, b, live) {
    if (a === null) { state.brush = null; } else { state.brush = [Math.min(a, b), Math.max(a, b)]; }
    document.getElementById("brush-info").textContent = state.brush ? "tables: " + fmtT(state.brush[0]) + " to " + fmtT(state.brush[1]) : "";
    document.getElementById("brush-clear").hidden = !state.brush;
    draw();
    if (!live) tables();
  }
  document.getElementById("brush-clear").addEventListener("click", function () { setBrush(null); });
  function inBrush(t) { return !state.brush || (t >= state.brush[0] && t <= state.brush[1]); }

  // Event view
  function choose(i) {
    state.chosen = i;
    var ev = D.events[i];
    document.getElementById("event-none").hidden = true;
    document.getElementById("event-view").hidden = false;
    document.getElementById("event-line").textContent = eventLine(ev);
    var strip = document.getElementById("strip");
    while (strip.firstChild) strip.removeChild(strip.firstChild);
    ev.cs.forEach(function (c) {
      var row = el("div", { "class": "carrier" });
      var what = ev.fr ? "DATA frame " + c.i + " of stream " + c.s : "chunk " + c.i;
      row.appendChild(el("div", { "class": "label", title: "at byte " + c.o + " of the " + (ev.fr ? "connection's server stream" : "body") }, what + " @" + c.o));
      var head = el("div", { "class": "frame-head", title: c.ht }, c.h);
      row.appendChild(head);
      var total = c.b + c.e + c.a;
      function part(cls, n, text) {
        if (n <= 0) return;
        var d = el("div", { "class": cls }, text);
        d.style.flex = String(Math.max(n / Math.max(total, 1), 0.08));
        row.appendChild(d);
      }
      if (ev.gz) {
        total = c.n;
        part("this", c.n, c.n + " compressed bytes (" + c.k + (c.k === 1 ? " event" : " events") + (c.z ? ", inflating to " + c.z + " bytes" : "") + ")");
      } else {
        part("other", c.b, bytes(c.b) + " before");
        part("this", c.e, bytes(c.e) + " of this event" + (c.z ? " (inflated " + c.z + ")" : ""));
        part("other", c.a, bytes(c.a) + " after" + (c.k > 1 ? " (" + (c.k - 1) + " other " + (c.k === 2 ? "event" : "events") + " share it)" : ""));
      }
      if (c.t) row.appendChild(el("div", { "class": "frame-tail", title: ev.fr ? "padding" : "the CRLF that ends the chunk data" }, c.t));
      row.setAttribute("data-size", c.n);
      strip.appendChild(row);
    });
    if (ev.more) strip.appendChild(el("p", {}, "… and " + ev.more + " more " + (ev.fr ? "DATA frames" : "chunks") + " (not listed)"));
    if (!ev.cs.length) strip.appendChild(el("p", {}, "This body is not chunked: the event is bytes " + ev.o + " to " + (ev.o + ev.n) + " of it."));
    var obj = ev.obj;
    try { obj = JSON.stringify(JSON.parse(ev.obj), null, 2); } catch (e) { if (ev.obj.length < ev.ol) obj += "\n… (" + ev.ol + " bytes in all; the page shows the first " + ev.obj.length + ")"; }
    // JSON.stringify writes bidirectional controls and line separators
    // as themselves: escaped again, as the terminal output has them, so
    // that a value cannot reorder what is shown around it.
    obj = obj.replace(/[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g, function (c) {
      return "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0");
    });
    document.getElementById("event-object").textContent = obj;
    var dw = document.getElementById("event-diff-wrap");
    dw.hidden = !(ev.ch && ev.ch.length);
    document.getElementById("event-diff").textContent = (ev.ch || []).join("\n");
    draw();
  }

  // Tables
  function counts(l) {
    if (!state.brush) return l.counts;
    var c = [0, 0, 0, 0, 0, 0];
    if (l.dense) l.bins.forEach(function (b) { if (inBrush(b[0])) for (var k = 0; k < 6; k++) c[k] += b[k + 1]; });
    else l.m.forEach(function (m) { if (inBrush(m[0])) c[m[1]]++; });
    return c;
  }
  var sortBy = { col: -1, dir: 1 };
  var watchCols = [
    ["watch", function (l) { return l.i; }, function (v) { return laneName(D.lanes[v]); }],
    ["client", function (l) { return l.who || l.client; }],
    ["address", function (l) { return l.client; }],
    ["User-Agent", function (l) { return l.ua; }],
    ["resource", function (l) { return l.path; }],
    ["selectors", function (l) { return l.sel; }],
    ["opened", function (l) { return (l.reason || (l.link ? l.link.split("|")[1] : "")).split(":")[0]; }],
    ["first event", function (l) { return l.first; }, fmtMs],
    ["last event", function (l) { return l.last; }, fmtMs],
    ["ADDED", function (l) { return counts(l)[0]; }],
    ["MODIFIED", function (l) { return counts(l)[1]; }],
    ["DELETED", function (l) { return counts(l)[2]; }],
    ["BOOKMARK", function (l) { return counts(l)[3]; }],
    ["ERROR", function (l) { return counts(l)[4]; }],
    ["ended", function (l) { return l.how || (l.end === null ? "open at the end" : ""); }],
    ["findings", function (l) { return l.findings.join("; "); }]
  ];
  function watchesTable() {
    var t = document.getElementById("watches");
    while (t.firstChild) t.removeChild(t.firstChild);
    var hr = el("tr");
    watchCols.forEach(function (c, i) {
      var th = el("th", { "data-col": i }, c[0]);
      if (sortBy.col === i) th.className = sortBy.dir > 0 ? "sorted-asc" : "sorted-desc";
      th.addEventListener("click", function () { sortBy.dir = sortBy.col === i ? -sortBy.dir : 1; sortBy.col = i; watchesTable(); });
      hr.appendChild(th);
    });
    t.appendChild(hr);
    var rows = D.lanes.slice();
    if (sortBy.col >= 0) {
      var f = watchCols[sortBy.col][1];
      rows.sort(function (a, b) { var x = f(a), y = f(b); if (x === y) return 0; if (x === null || x === undefined) return 1; if (y === null || y === undefined) return -1; return (x < y ? -1 : 1) * sortBy.dir; });
    }
    rows.forEach(function (l) {
      var tr = el("tr", { "data-lane": l.i });
      watchCols.forEach(function (c) {
        var v = c[1](l);
        var td = el("td", { "class": typeof v === "number" && !c[2] ? "num" : c[0] === "ended" || c[0] === "findings" ? "wide" : "" }, c[2] ? c[2](v) : v);
        tr.appendChild(td);
      });
      tr.title = laneTitle(l) + (l.health ? "\nhealth: " + l.health : "");
      t.appendChild(tr);
    });
  }
  function eventsTable() {
    var t = document.getElementById("events");
    while (t.firstChild) t.removeChild(t.firstChild);
    var hr = el("tr");
    ["time", "watch", "seq", "type", "what", "carried by"].forEach(function (h) { hr.appendChild(el("th", {}, h)); });
    t.appendChild(hr);
    var shown = 0, inRange = 0, LIMIT = 500;
    D.events.forEach(function (ev, i) {
      if (!inBrush(ev.t)) return;
      inRange++;
      if (shown >= LIMIT) return;
      shown++;
      var tr = el("tr", { "class": "clickable", "data-ev": i });
      [ev.ts, laneName(D.lanes[ev.l]), ev.s, ev.ty, ev.w, ev.c].forEach(function (v, k) {
        var td = el("td", { "class": k === 2 ? "num" : k === 3 ? "mono" : "" }, v);
        if (k === 3) { td.className = "mono"; var sw = el("i", { "class": "t-" + (TYPES.indexOf(ev.ty) >= 0 ? ev.ty : "other") }); sw.style.cssText = "display:inline-block;width:8px;height:8px;margin-right:4px"; td.insertBefore(sw, td.firstChild); }
        tr.appendChild(td);
      });
      tr.addEventListener("click", function () { choose(i); document.getElementById("event").scrollIntoView(); });
      t.appendChild(tr);
    });
    document.getElementById("events-range").textContent = state.brush ? "(" + fmtT(state.brush[0]) + " to " + fmtT(state.brush[1]) + ")" : "";
    var more = inRange > shown ? "The first " + shown + " of " + inRange + " events are listed; choose a shorter time range to see others." : "";
    if (D.events.length < D.eventCount) more += " The table lists the " + D.events.length + " events whose bytes the report kept (spread over the capture, ERROR and initial-events-end ones first), of " + D.eventCount + ".";
    document.getElementById("events-more").textContent = more;
    t.setAttribute("data-rows", shown);
    t.setAttribute("data-in-range", inRange);
  }
  function tables() { watchesTable(); eventsTable(); }

  // Health
  function healthCharts() {
    var rate = document.getElementById("rate"), W = 560, H = 200, P = 30;
    // Each watch's events re-binned into at most 120 steps across the
    // capture, none narrower than the watch's own bins.
    var binW = 0; lanes.forEach(function (l) { if (l.bins.length && l.binW > binW) binW = l.binW; });
    var step = Math.max(span / 120, binW || 1), N = Math.max(1, Math.ceil(span / step)), maxRate = 0;
    var series = lanes.map(function (l) {
      var c = new Array(N).fill(0);
      l.bins.forEach(function (b) { var n = 0; for (var k = 1; k <= 6; k++) n += b[k]; c[Math.max(0, Math.min(N - 1, Math.floor(b[0] / step)))] += n; });
      return c.map(function (n, i) { var r = n / (step / 1000); if (r > maxRate) maxRate = r; return [(i + 0.5) * step, r]; });
    });
    sv("text", { x: 2, y: 10 }, rate).textContent = maxRate.toFixed(maxRate < 10 ? 1 : 0) + "/s";
    sv("text", { x: P, y: H - 4 }, rate).textContent = "+0 s";
    sv("text", { x: W - 60, y: H - 4 }, rate).textContent = fmtT(span);
    var colors = ["#2e9e44", "#1aa7b8", "#c9a000", "#d33", "#a3a", "#06c", "#e80", "#555"];
    series.forEach(function (s, i) {
      var pts = s.map(function (p) { return (P + p[0] / span * (W - P - 5)).toFixed(1) + "," + (H - 15 - p[1] / Math.max(maxRate, 1e-9) * (H - 30)).toFixed(1); });
      titled(sv("polyline", { points: pts.join(" "), fill: "none", stroke: colors[i % colors.length], "stroke-width": 1.2, "data-lane": lanes[i].i }, rate), laneName(lanes[i]) + " " + lanes[i].path);
    });
    var sizes = document.getElementById("sizes");
    // The health records' buckets: chunks and DATA frames that carried events.
    var maxN = 1; D.sizes.forEach(function (s) { if (s.n > maxN) maxN = s.n; });
    var bw = D.sizes.length ? (W - 2 * P) / D.sizes.length : 0;
    D.sizes.forEach(function (s, i) {
      var hh = s.n / maxN * (H - 40);
      titled(sv("rect", { x: P + i * bw + 2, y: H - 20 - hh, width: Math.max(bw - 4, 1), height: hh, fill: "#4a90e2", "data-bucket": s.name, "data-count": s.n }, sizes),
        s.n + " chunks or DATA frames of " + s.name + " carried events");
      sv("text", { x: P + i * bw + 2, y: H - 6 }, sizes).textContent = s.name;
      sv("text", { x: P + i * bw + 2, y: H - 23 - hh }, sizes).textContent = String(s.n);
    });
    var bt = document.getElementById("bookmarks"), bh = el("tr");
    ["watch", "resource", "bookmarks", "shortest interval", "median", "longest"].forEach(function (h) { bh.appendChild(el("th", {}, h)); });
    bt.appendChild(bh);
    D.lanes.forEach(function (l) {
      if (!l.bookmarks || !l.bookmarks[0]) return;
      var tr = el("tr");
      var iv = function (v) { return l.bookmarks[0] > 1 ? (v / 1000).toFixed(3) + " s" : "-"; };
      [laneName(l), l.path, l.bookmarks[0], iv(l.bookmarks[1]), iv(l.bookmarks[2]), iv(l.bookmarks[3])].forEach(function (v, k) { tr.appendChild(el("td", { "class": k >= 2 ? "num" : "" }, v)); });
      bt.appendChild(tr);
    });
    if (bt.children.length === 1) bt.appendChild(el("tr", {}, "")).appendChild(el("td", { colspan: 6 }, "No bookmark in this " + (D.live ? "session" : "capture") + "."));
    var ul = document.getElementById("health");
    D.lanes.forEach(function (l) {
      if (!l.health && !l.findings.length) return;
      var li = el("li", {}, laneName(l) + " " + l.path + ": " + (l.health || ""));
      if (l.findings.length) li.appendChild(el("strong", {}, " findings: " + l.findings.join("; ")));
      ul.appendChild(li);
    });
    if (D.lists.length || D.retries.length) {
      document.getElementById("lists-wrap").hidden = false;
      var lu = document.getElementById("lists");
      D.lists.forEach(function (s) { lu.appendChild(el("li", {}, s)); });
      D.retries.forEach(function (n) { lu.appendChild(el("li", {}, fmtT(n.t) + "  " + n.x)); });
    }
  }

  // Every problem and warning (the first 500), a watch's or not: a
  // connection kwatch could not decrypt has no lane to be drawn on.
  if (D.problems.length) {
    document.getElementById("problems-section").hidden = false;
    var pl = document.getElementById("problems");
    D.problems.forEach(function (n) {
      var li = el("li", { "class": "k-" + n.k }, fmtMs(n.t) + "  " + (n.k === "warning" ? "warning: " : n.k === "note" ? "not decoded: " : "") + n.x);
      pl.appendChild(li);
    });
  }

  draw();
  tables();
  healthCharts();
  // A small interface for people (and tests) at the browser's console.
  window.kwatchReport = {
    data: D,
    visible: function () { return [state.from, state.to]; },
    brushed: function () { return state.brush; },
    zoom: zoom,
    brush: function (a, b) { setBrush(a, b); },
    choose: choose
  };
})();
