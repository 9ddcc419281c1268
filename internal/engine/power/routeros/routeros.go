package routeros

import (
	"bufio"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// DefaultPort is the plain RouterOS API port.
const DefaultPort = "8728"

// maxWord caps a word read from the wire so a confused peer cannot make us
// allocate gigabytes.
const maxWord = 1 << 20

// EncodeLength returns the RouterOS variable-length prefix for a word of n
// bytes (1 to 5 bytes, high bits of the first byte say how many).
func EncodeLength(n int) []byte {
	switch {
	case n < 0x80:
		return []byte{byte(n)}
	case n < 0x4000:
		n |= 0x8000
		return []byte{byte(n >> 8), byte(n)}
	case n < 0x200000:
		n |= 0xC00000
		return []byte{byte(n >> 16), byte(n >> 8), byte(n)}
	case n < 0x10000000:
		n |= 0xE0000000
		return []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	default:
		return []byte{0xF0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
}

// ReadLength reads one length prefix.
func ReadLength(r io.ByteReader) (int, error) {
	b, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	var extra int
	var n int
	switch {
	case b&0x80 == 0:
		return int(b), nil
	case b&0xC0 == 0x80:
		extra, n = 1, int(b&0x3F)
	case b&0xE0 == 0xC0:
		extra, n = 2, int(b&0x1F)
	case b&0xF0 == 0xE0:
		extra, n = 3, int(b&0x0F)
	case b == 0xF0:
		extra, n = 4, 0
	default:
		return 0, fmt.Errorf("routeros: invalid length prefix byte 0x%02x (control byte or not a RouterOS API port)", b)
	}
	for range extra {
		c, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		n = n<<8 | int(c)
	}
	return n, nil
}

// EncodeSentence encodes words as one sentence: each word length-prefixed,
// then a zero-length word.
func EncodeSentence(words ...string) []byte {
	var out []byte
	for _, w := range words {
		out = append(out, EncodeLength(len(w))...)
		out = append(out, w...)
	}
	return append(out, 0)
}

// ReadSentence reads words up to the terminating empty word.
func ReadSentence(r *bufio.Reader) ([]string, error) {
	var words []string
	for {
		n, err := ReadLength(r)
		if err != nil {
			if len(words) > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return words, err
		}
		if n == 0 {
			return words, nil
		}
		if n > maxWord {
			return words, fmt.Errorf("routeros: word of %d bytes exceeds %d", n, maxWord)
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return words, fmt.Errorf("routeros: reading word: %w", err)
		}
		words = append(words, string(buf))
	}
}

// Reply is one reply sentence: its type (!done, !re, !trap, !fatal) and its
// =key=value attributes.
type Reply struct {
	Type  string
	Attrs map[string]string
}

func parseReply(words []string) Reply {
	r := Reply{Attrs: map[string]string{}}
	if len(words) == 0 {
		return r
	}
	r.Type = words[0]
	for _, w := range words[1:] {
		if rest, ok := strings.CutPrefix(w, "="); ok {
			k, v, _ := strings.Cut(rest, "=")
			r.Attrs[k] = v
		} else if rest, ok := strings.CutPrefix(w, "."); ok {
			k, v, _ := strings.Cut(rest, "=")
			r.Attrs["."+k] = v
		}
	}
	if r.Type == "!fatal" && len(words) > 1 && r.Attrs["message"] == "" {
		r.Attrs["message"] = words[1]
	}
	return r
}

// TrapError is a !trap or !fatal reply: RouterOS refused the command.
type TrapError struct {
	Command string
	Type    string
	Message string
}

func (e *TrapError) Error() string {
	return fmt.Sprintf("routeros %s: %s %s", e.Command, e.Type, e.Message)
}

// ErrLoginFailed wraps a refused login, so callers can classify it as an
// authentication failure.
var ErrLoginFailed = errors.New("routeros login refused")

// Conn is one authenticated API connection.
type Conn struct {
	c       net.Conn
	r       *bufio.Reader
	Timeout time.Duration
}

// NewConn wraps an established TCP connection; Timeout bounds each command
// round trip (default 10 s).
func NewConn(c net.Conn) *Conn {
	return &Conn{c: c, r: bufio.NewReader(c), Timeout: 10 * time.Second}
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Run sends command with the given words (e.g. "=name=admin") and reads
// replies until !done, returning them all. A !trap or !fatal becomes a
// *TrapError. An I/O error (the device dropped the connection) is returned
// wrapped, with the replies read so far.
func (c *Conn) Run(command string, words ...string) ([]Reply, error) {
	if c.Timeout > 0 {
		_ = c.c.SetDeadline(time.Now().Add(c.Timeout))
	}
	if _, err := c.c.Write(EncodeSentence(append([]string{command}, words...)...)); err != nil {
		return nil, fmt.Errorf("routeros %s: send: %w", command, err)
	}
	var replies []Reply
	for {
		ws, err := ReadSentence(c.r)
		if err != nil {
			return replies, fmt.Errorf("routeros %s: read reply: %w", command, err)
		}
		rep := parseReply(ws)
		replies = append(replies, rep)
		switch rep.Type {
		case "!done":
			// A !trap is followed by !done; report the trap.
			for _, r := range replies {
				if r.Type == "!trap" {
					return replies, &TrapError{Command: command, Type: r.Type, Message: r.Attrs["message"]}
				}
			}
			return replies, nil
		case "!fatal":
			return replies, &TrapError{Command: command, Type: rep.Type, Message: rep.Attrs["message"]}
		}
	}
}

// Login authenticates. It sends the plain login of RouterOS 6.43+; if the
// device answers with a challenge (=ret=, older RouterOS) it completes the
// MD5 challenge-response. The password never appears in returned errors.
func (c *Conn) Login(user, password string) error {
	reps, err := c.Run("/login", "=name="+user, "=password="+password)
	if err != nil {
		var trap *TrapError
		if errors.As(err, &trap) {
			return fmt.Errorf("%w for user %q: %s", ErrLoginFailed, user, trap.Message)
		}
		return err
	}
	ret := ""
	for _, r := range reps {
		if v, ok := r.Attrs["ret"]; ok {
			ret = v
		}
	}
	if ret == "" {
		return nil
	}
	challenge, err := hex.DecodeString(ret)
	if err != nil {
		return fmt.Errorf("routeros /login: challenge %q is not hex", ret)
	}
	h := md5.New()
	h.Write([]byte{0})
	h.Write([]byte(password))
	h.Write(challenge)
	resp := "00" + hex.EncodeToString(h.Sum(nil))
	if _, err := c.Run("/login", "=name="+user, "=response="+resp); err != nil {
		var trap *TrapError
		if errors.As(err, &trap) {
			return fmt.Errorf("%w for user %q: %s", ErrLoginFailed, user, trap.Message)
		}
		return err
	}
	return nil
}
