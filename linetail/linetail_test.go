package linetail

import (
	"slices"
	"testing"
)

func TestWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		keep   int
		writes []string
		each   []string
		lines  []string
	}{
		{"lines split across writes", 0, []string{"a\nb", "c\nd"}, []string{"a", "bc"}, []string{"a", "bc", "d"}},
		{"only the last kept", 2, []string{"1\n2\n3\n4\n"}, []string{"1", "2", "3", "4"}, []string{"3", "4"}},
		{"an unfinished line counts", 2, []string{"1\n2\n3"}, []string{"1", "2"}, []string{"2", "3"}},
		{"a progress counter's last state", 0, []string{"10%\r50%\r100%\r\n"}, []string{"100%"}, []string{"100%"}},
		{"nothing written", 0, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var each []string
			w := &Writer{Keep: tc.keep, Each: func(l string) { each = append(each, l) }}
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", s, n, err)
				}
			}
			if !slices.Equal(each, tc.each) {
				t.Errorf("Each got %q, want %q", each, tc.each)
			}
			if got := w.Lines(); !slices.Equal(got, tc.lines) {
				t.Errorf("Lines() = %q, want %q", got, tc.lines)
			}
		})
	}
}
