package pcap

import (
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// packetDecoder decodes link, IP and TCP headers with gopacket's
// DecodingLayerParser, which reuses its layer structs: no allocation per
// packet.
type packetDecoder struct {
	eth     layers.Ethernet
	dot1q   layers.Dot1Q
	sll     layers.LinuxSLL
	sll2    layers.LinuxSLL2
	loop    layers.Loopback
	ip4     layers.IPv4
	ip6     layers.IPv6
	ip6ext  layers.IPv6ExtensionSkipper
	tcp     layers.TCP
	parsers map[gopacket.LayerType]*gopacket.DecodingLayerParser
	decoded []gopacket.LayerType
}

func newPacketDecoder() *packetDecoder {
	d := &packetDecoder{parsers: map[gopacket.LayerType]*gopacket.DecodingLayerParser{}}
	all := []gopacket.DecodingLayer{&d.eth, &d.dot1q, &d.sll, &d.sll2, &d.loop, &d.ip4, &d.ip6, &d.ip6ext, &d.tcp}
	for _, first := range []gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeLinuxSLL,
		layers.LayerTypeLinuxSLL2, layers.LayerTypeLoopback, layers.LayerTypeIPv4, layers.LayerTypeIPv6} {
		p := gopacket.NewDecodingLayerParser(first, all...)
		p.IgnoreUnsupported = true
		d.parsers[first] = p
	}
	return d
}

// firstLayer maps a capture link type to the layer its packets start with.
// Raw IP link types start with IPv4 or IPv6 by the version nibble.
func firstLayer(link layers.LinkType, data []byte) (gopacket.LayerType, error) {
	switch link {
	case layers.LinkTypeEthernet:
		return layers.LayerTypeEthernet, nil
	case layers.LinkTypeLinuxSLL:
		return layers.LayerTypeLinuxSLL, nil
	case layers.LinkTypeLinuxSLL2:
		return layers.LayerTypeLinuxSLL2, nil
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		return layers.LayerTypeLoopback, nil
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, 12, 14:
		// 12 and 14 are the raw IP link types of some BSDs and old libpcap.
		if len(data) > 0 && data[0]>>4 == 6 {
			return layers.LayerTypeIPv6, nil
		}
		return layers.LayerTypeIPv4, nil
	}
	return 0, fmt.Errorf("link type %d (%s) is not supported; capture on an Ethernet, loopback or \"any\" interface", int(link), link)
}

// decode parses one packet. It returns ok=false for packets without TCP
// (other protocols, IP fragments after the first); err is set only for a
// link type that cannot be decoded at all. truncated reports an IP packet
// cut short by the capture's snaplen.
func (d *packetDecoder) decode(link layers.LinkType, data []byte) (netFlow gopacket.Flow, tcp *layers.TCP, ok bool, err error) {
	first, err := firstLayer(link, data)
	if err != nil {
		return netFlow, nil, false, err
	}
	p := d.parsers[first]
	d.decoded = d.decoded[:0]
	_ = p.DecodeLayers(data, &d.decoded) // errors leave d.decoded with what parsed
	hasTCP := false
	for _, lt := range d.decoded {
		switch lt {
		case layers.LayerTypeIPv4:
			netFlow = d.ip4.NetworkFlow()
		case layers.LayerTypeIPv6:
			netFlow = d.ip6.NetworkFlow()
		case layers.LayerTypeTCP:
			hasTCP = true
		}
	}
	if !hasTCP {
		return netFlow, nil, false, nil
	}
	return netFlow, &d.tcp, true, nil
}
