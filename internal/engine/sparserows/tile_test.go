package sparserows

import "testing"

func TestTileCoversEveryRowOnceAndMatchesRuntimeSplit(t *testing.T) {
	const rows = 1006
	for _, tp := range []int{1, 2, 3, 4, 8} {
		owner := make([]int, rows)
		for i := range owner {
			owner[i] = -1
		}
		base, rem := int64(rows/tp), int64(rows%tp)
		for r := 0; r < tp; r++ {
			first, count, err := Tile(rows, tp, r)
			if err != nil {
				t.Fatalf("tp=%d rank=%d: %v", tp, r, err)
			}
			wantCount := base
			if int64(r) < rem {
				wantCount++
			}
			if wantFirst := int64(r)*base + min(int64(r), rem); first != wantFirst || count != wantCount {
				t.Fatalf("tp=%d rank=%d: got [%d,+%d), runtime split is [%d,+%d)", tp, r, first, count, wantFirst, wantCount)
			}
			for i := first; i < first+count; i++ {
				if owner[i] != -1 {
					t.Fatalf("tp=%d: row %d owned by ranks %d and %d", tp, i, owner[i], r)
				}
				owner[i] = r
			}
		}
		for i, o := range owner {
			if o == -1 {
				t.Fatalf("tp=%d: row %d owned by no rank", tp, i)
			}
		}
	}
	// The rows*r/tp split of an earlier tool differs from the runtime's
	// when rows%tp != 0: rank 1 of 4 starts at 251 there, 252 here.
	first, _, _ := Tile(rows, 4, 1)
	if naive := int64(rows * 1 / 4); first == naive {
		t.Fatalf("rank 1 of 4 starts at %d, same as the off-by-one rows*r/tp split", first)
	}
	if first != 252 {
		t.Fatalf("rank 1 of 4 over 1006 rows starts at %d, runtime expects 252", first)
	}
}

func TestTileRejectsBadShapes(t *testing.T) {
	if _, _, err := Tile(3, 4, 0); err == nil {
		t.Fatal("tp=4 over 3 rows: want an error")
	}
	if _, _, err := Tile(10, 0, 0); err == nil {
		t.Fatal("tp=0: want an error")
	}
	if _, _, err := Tile(10, 2, 2); err == nil {
		t.Fatal("rank 2 of tp 2: want an error")
	}
}
