package power

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
)

// DefaultBroadcast is where magic packets go when power.broadcast is empty:
// the limited broadcast address on the discard port, which every NIC in the
// local segment hears.
const DefaultBroadcast = "255.255.255.255:9"

// MagicPacket builds the 102-byte Wake-on-LAN payload for mac: six 0xFF
// bytes, then the 6-byte MAC sixteen times.
func MagicPacket(mac string) ([]byte, error) {
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf(
			"power.wol %q is not a 6-byte MAC address: write it as aa:bb:cc:dd:ee:ff", mac))
	}
	p := make([]byte, 0, 102)
	p = append(p, bytes.Repeat([]byte{0xff}, 6)...)
	for range 16 {
		p = append(p, hw...)
	}
	return p, nil
}

// WakeOnLAN sends a magic packet for mac over UDP to broadcast
// ("192.168.1.255", "192.168.1.255:9"; empty means DefaultBroadcast). The
// socket is allowed to broadcast, so a subnet broadcast address works.
func WakeOnLAN(ctx context.Context, mac, broadcast string) error {
	pkt, err := MagicPacket(mac)
	if err != nil {
		return err
	}
	addr := broadcast
	if addr == "" {
		addr = DefaultBroadcast
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "9")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("power.broadcast %q is not host or host:port", broadcast))
	}
	d := net.Dialer{Timeout: 5 * time.Second, Control: allowBroadcast}
	conn, err := d.DialContext(ctx, "udp4", addr)
	if err != nil {
		return fmt.Errorf("wake-on-lan %s via %s: %w", mac, addr, err)
	}
	defer conn.Close()
	// Three copies: UDP is lossy and a NIC in standby ignores duplicates.
	for i := range 3 {
		if _, err := conn.Write(pkt); err != nil {
			return fmt.Errorf("wake-on-lan %s via %s: send %d: %w (check power.broadcast for the node's subnet)", mac, addr, i+1, err)
		}
	}
	return nil
}

// allowBroadcast sets SO_BROADCAST; without it the kernel refuses (EACCES)
// to send to a broadcast address.
func allowBroadcast(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = setBroadcast(fd)
	})
	if err != nil {
		return err
	}
	return serr
}
