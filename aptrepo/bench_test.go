package aptrepo

import (
	"context"
	"path/filepath"
	"testing"
)

// BenchmarkBuildIndexOnly indexes the .debs cached by
// bench/aptrepo/run.sh, if present: the same work as `repo --in-place`.
func BenchmarkBuildIndexOnly(b *testing.B) {
	debs, _ := filepath.Glob(filepath.Join(cacheDir(b), "debs", "bench", "*.deb"))
	if len(debs) == 0 {
		b.Skip("no cached .debs; run bench/aptrepo/run.sh --fetch-only")
	}
	signer := testSigner(b, testDate)
	var total int64
	for b.Loop() {
		res, err := Build(context.Background(), Options{Debs: debs, Out: b.TempDir(), Placement: IndexOnly, Date: testDate, Signer: signer})
		if err != nil {
			b.Fatal(err)
		}
		total = res.TotalBytes
	}
	b.SetBytes(total)
}
