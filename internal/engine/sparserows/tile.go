package sparserows

import "fmt"

// Tile returns the rows rank owns out of rows split over tp ranks, matching
// the runtime's split: base = rows/tp, rem = rows%tp; rank r owns
// base + (r < rem) rows starting at r*base + min(r, rem).
func Tile(rows int64, tp, rank int) (first, count int64, err error) {
	if tp < 1 {
		return 0, 0, fmt.Errorf("tensor parallel size %d: must be at least 1", tp)
	}
	if rank < 0 || rank >= tp {
		return 0, 0, fmt.Errorf("rank %d outside 0..%d", rank, tp-1)
	}
	if rows < int64(tp) {
		return 0, 0, fmt.Errorf("table has %d rows, fewer than tp=%d ranks", rows, tp)
	}
	base := rows / int64(tp)
	rem := rows % int64(tp)
	r := int64(rank)
	count = base
	if r < rem {
		count++
	}
	first = r*base + min(r, rem)
	return first, count, nil
}
