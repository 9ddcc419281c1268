package sim_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// BenchmarkLoadVsDD measures engine-sim's weight load (header parse + read
// every byte) against dd reading the same shards to /dev/null in the same
// run, and reports the ratio. Size: SIM_BENCH_MIB (default 256).
//
//	go test -run '^$' -bench LoadVsDD -benchtime 3x ./internal/sim/
func BenchmarkLoadVsDD(b *testing.B) {
	mib := 256
	if v, err := strconv.Atoi(os.Getenv("SIM_BENCH_MIB")); err == nil && v > 0 {
		mib = v
	}
	// 8 shards x 4 tensors x rows x 4096 cols BF16.
	rows := int64(mib) << 20 / (8 * 4 * 4096 * 2)
	dir := simtest.WriteModel(b, filepath.Join(b.TempDir(), "model"), simtest.Model{Shards: 8, Tensors: 4, Rows: rows, Cols: 4096})
	shards, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	var total int64
	for _, s := range shards {
		fi, _ := os.Stat(s)
		total += fi.Size()
	}
	load := func() time.Duration {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		var took time.Duration
		err := sim.Run(ctx, sim.Config{ModelPath: dir, Port: simtest.FreePort(b), OnServing: func(net.Addr) { took = time.Since(start); cancel() }})
		if err != nil {
			b.Fatal(err)
		}
		return took
	}
	dd := func() time.Duration {
		start := time.Now()
		for _, s := range shards {
			if out, err := exec.Command("dd", "if="+s, "of=/dev/null", "bs=1M").CombinedOutput(); err != nil {
				b.Fatalf("dd %s: %v %s", s, err, out)
			}
		}
		return time.Since(start)
	}
	dd() // warm the page cache for both
	var tSim, tDD time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tSim += load()
		tDD += dd()
	}
	b.StopTimer()
	simMBps := float64(total) * float64(b.N) / tSim.Seconds() / (1 << 20)
	ddMBps := float64(total) * float64(b.N) / tDD.Seconds() / (1 << 20)
	b.ReportMetric(simMBps, "sim-MiB/s")
	b.ReportMetric(ddMBps, "dd-MiB/s")
	b.ReportMetric(simMBps/ddMBps, "sim/dd")
	fmt.Printf("load %d MiB x %d: engine-sim %.0f MiB/s, dd %.0f MiB/s, ratio %.2f\n", total>>20, b.N, simMBps, ddMBps, simMBps/ddMBps)
}
