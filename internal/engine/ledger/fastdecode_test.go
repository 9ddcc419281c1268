package ledger

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// bigLedger is a ledger as a mirror of n small blobs writes it: sealed
// entries, sealed links.
func bigLedger(n int) *Ledger {
	l := New("hub-mirror")
	at := time.Date(2026, 12, 3, 18, 41, 12, 27458988, time.UTC)
	l.Links = map[string]LinkSeal{}
	for i := 0; i < n; i++ {
		sum := fmt.Sprintf("%064x", i*7919)
		rel := "models--org--small/blobs/" + sum
		l.Entries[rel] = Entry{Size: 8192, Sampled: fmt.Sprintf("%064x", i), SHA256: sum, Source: rel, VerifiedAt: at,
			Seal: &Seal{Dev: 65024, Ino: uint64(1126983 + i), MtimeNS: 1796323272023835838 + int64(i), CtimeNS: 1796323272023835838 + int64(i)}}
		l.Links[fmt.Sprintf("models--org--small/snapshots/0123/shards/%03d/file-%06d.bin", i/1000, i)] = LinkSeal{Target: "../../../../blobs/" + sum,
			Seal: Seal{Dev: 65024, Ino: uint64(2126983 + i), MtimeNS: -5, CtimeNS: 1796323272447835838}}
	}
	l.Entries["models--org--small/refs/main"] = Entry{Size: 40, Sampled: "ab", Source: "models--org--small/refs/main", VerifiedAt: at}
	return l
}

// What Save writes is read by the fast path, into what encoding/json
// reads from it.
func TestDecodeFastReadsWhatSaveWrites(t *testing.T) {
	l := bigLedger(300)
	b, err := l.encode()
	if err != nil {
		t.Fatal(err)
	}
	got := New("hub-mirror")
	if !decodeFast(b, got) {
		t.Fatal("the fast path gave up on a ledger Save wrote")
	}
	want := New("hub-mirror")
	if err := json.Unmarshal(b, want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the fast path read another ledger than encoding/json")
	}
	if _, err := decode(b, "x", "hub-mirror"); err != nil {
		t.Fatal(err)
	}
}

// FuzzDecodeFast: whatever the input, when the fast path takes it, it reads
// what encoding/json reads (and encoding/json accepts it); when it gives up,
// decode falls back to encoding/json. Seeds cover the shapes it must give
// up on (escapes, nulls, floats, leading zeros, keys in another case,
// unknown keys, duplicate keys, trailing data, invalid UTF-8).
func FuzzDecodeFast(f *testing.F) {
	b, _ := bigLedger(2).encode()
	f.Add(b)
	for _, s := range []string{
		`{"version":1,"kind":"k","entries":{"a":{"size":1,"sampled":"s","seal":null}}}`,
		`{"version":1,"entries":{"a\u00e9":{"size":1}}}`,
		`{"version":1,"entries":{"a":{"size":1.0}}}`,
		`{"version":01}`,
		`{"Version":1}`,
		`{"version":1,"other":2}`,
		`{"version":1,"entries":{"a":{"seal":{"dev":1},"seal":{"ino":2}}},"entries":{"b":{}}}`,
		`{"version":1} x`,
		"{\"version\":1,\"kind\":\"\xff\"}",
		`{"version":1,"kind":null}`,
		` { "version" : 1 , "links" : { "l" : { "target" : "t" , "dev" : 3 } } } `,
		`{"version":-0,"entries":{"a":{"size":-12,"verified_at":"2026-12-03T18:41:12+02:00"}}}`,
		`{"version":1,"entries":{"a":{"verified_at":"2026-13-03T18:41:12Z"}}}`,
		`{"version":1,"entries":{"a":{"size":99999999999999999999}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = append([]byte(nil), b...) // the fast path keeps b
		got := New("k")
		if !decodeFast(b, got) {
			return
		}
		want := New("k")
		if err := json.Unmarshal(b, want); err != nil {
			t.Fatalf("the fast path read %q, which encoding/json refuses: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: fast path %+v, encoding/json %+v", b, got, want)
		}
	})
}

// BenchmarkDecode reads the ledger of a mirror of 5,000 small blobs.
func BenchmarkDecode(b *testing.B) {
	data, err := bigLedger(5000).encode()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decode(append([]byte(nil), data...), "x", "hub-mirror"); err != nil {
			b.Fatal(err)
		}
	}
}
