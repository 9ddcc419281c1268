package power_test

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/power"
	"github.com/sparklane/sparklane/internal/fault"
)

func listenUDP(t *testing.T) *net.UDPConn {
	t.Helper()
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

func TestWakeOnLANPacket(t *testing.T) {
	pc := listenUDP(t)
	mac := "3c:ec:ef:01:02:0a"
	if err := power.WakeOnLAN(context.Background(), mac, pc.LocalAddr().String()); err != nil {
		t.Fatal(err)
	}
	hw, _ := net.ParseMAC(mac)
	want := append(bytes.Repeat([]byte{0xff}, 6), bytes.Repeat(hw, 16)...)
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1500)
	n, _, err := pc.ReadFromUDP(buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != 102 {
		t.Fatalf("magic packet is %d bytes, want 102", n)
	}
	if !bytes.Equal(buf[:n], want) {
		t.Fatalf("payload % x\nwant    % x", buf[:n], want)
	}
	if buf[0] != 0xff || buf[5] != 0xff || buf[6] != 0x3c || buf[101] != 0x0a {
		t.Fatalf("framing wrong: % x", buf[:n])
	}
}

func TestWakeOnLANBadMAC(t *testing.T) {
	for _, mac := range []string{"", "zz:zz", "00:11:22:33:44:55:66:77"} {
		err := power.WakeOnLAN(context.Background(), mac, "127.0.0.1:9")
		if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec {
			t.Errorf("%q: want InvalidSpec, got %v", mac, err)
		}
	}
}
