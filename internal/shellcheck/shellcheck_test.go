package shellcheck

import "testing"

// TestCheck checks that the helper reports what it should: a parse
// error, a shellcheck warning, and nothing for a clean script or a
// warning disabled in place.
func TestCheck(t *testing.T) {
	Require(t)
	for _, tc := range []struct {
		name, script string
		ok           bool
	}{
		{"clean", "set -eu\necho \"$1\"\n", true},
		{"parse error", "if true; then\n", false},
		{"unquoted", "rm $1\n", false},
		{"disabled in place", "# shellcheck disable=SC2086 # split on purpose\nrm $1\n", true},
		{"bash by shebang", "#!/bin/bash\na=(1 2)\necho \"${a[@]}\"\n", true},
	} {
		ft := &fakeT{TB: t}
		Check(ft, tc.name, tc.script)
		if ft.failed == tc.ok {
			t.Errorf("%s: failed %v, want %v", tc.name, ft.failed, !tc.ok)
		}
	}
}

type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Errorf(string, ...any) { f.failed = true }
