// Command floor is the physical floor of kwatch's benchmarks: it only reads
// every packet of a capture with pcapgo and counts bytes, doing none of the
// decoding. kwatch pcap cannot be faster than this on the same file.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"github.com/gopacket/gopacket/pcapgo"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: floor FILE.pcap")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r, err := pcapgo.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var packets, bytes int64
	for {
		data, _, err := r.ZeroCopyReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		packets++
		bytes += int64(len(data))
	}
	fmt.Printf("%d packets, %d bytes\n", packets, bytes)
}
