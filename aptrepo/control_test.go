package aptrepo

import (
	"errors"
	"strings"
	"testing"
)

func TestParseControl(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Paragraph
		wantErr string
	}{
		{
			name: "simple",
			in:   "Package: a\nVersion: 1.0\nArchitecture: all\n",
			want: Paragraph{{"Package", "a"}, {"Version", "1.0"}, {"Architecture", "all"}},
		},
		{
			name: "continuation lines kept verbatim",
			in:   "Package: a\nDescription: short\n long\n .\n\tmore\n",
			want: Paragraph{{"Package", "a"}, {"Description", "short\n long\n .\n\tmore"}},
		},
		{
			name: "empty first line of a multi-line value",
			in:   "Conffiles:\n /etc/a 0123\n",
			want: Paragraph{{"Conffiles", "\n /etc/a 0123"}},
		},
		{
			name: "blanks around values and lines trimmed, comments and blank lines around dropped",
			in:   "\n# comment\nPackage:   a  \nVersion:1 \n\n\n",
			want: Paragraph{{"Package", "a"}, {"Version", "1"}},
		},
		{
			name: "no final newline",
			in:   "Package: a",
			want: Paragraph{{"Package", "a"}},
		},
		{name: "empty", in: "", wantErr: "no fields"},
		{name: "only blank lines", in: "\n\n", wantErr: "no fields"},
		{name: "second paragraph", in: "Package: a\n\nPackage: b\n", wantErr: "more than one paragraph"},
		{name: "continuation first", in: " Package: a\n", wantErr: "continuation line before any field"},
		{name: "no colon", in: "Package a\n", wantErr: "no colon"},
		{name: "empty name", in: ": a\n", wantErr: "bad field name"},
		{name: "name with blank", in: "Pack age: a\n", wantErr: "bad field name"},
		{name: "name starting with dash", in: "-Package: a\n", wantErr: "bad field name"},
		{name: "duplicate field, other case", in: "Package: a\npackage: b\n", wantErr: "given twice"},
		{name: "carriage return", in: "Package: a\r\nVersion: 1\n", wantErr: "control character"},
		{name: "NUL", in: "Package: a\x00\n", wantErr: "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseControl([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errControl) {
					t.Fatalf("ParseControl(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseControl(%q): %v", tt.in, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("ParseControl(%q) = %q, want %q", tt.in, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("ParseControl(%q) = %q, want %q", tt.in, got, tt.want)
				}
			}
			// Writing it back and parsing again gives the same paragraph.
			again, err := ParseControl(got.appendTo(nil))
			if err != nil || len(again) != len(got) {
				t.Fatalf("round trip of %q: %q, %v", got.appendTo(nil), again, err)
			}
			for i := range got {
				if again[i] != got[i] {
					t.Fatalf("round trip: %q, want %q", again, got)
				}
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string
	}{
		{"Package: linux-headers-6.1.0-31-amd64\nVersion: 6.1.128-1\nArchitecture: amd64\n", ""},
		{"Package: g++-12\nVersion: 1:12.2.0-14+deb12u1~bpo.1\nArchitecture: all\n", ""},
		{"Version: 1\nArchitecture: all\n", "missing Package field"},
		{"Package: a1\nArchitecture: all\n", "missing Version field"},
		{"Package: a1\nVersion: 1\n", "missing Architecture field"},
		{"Package: a1\nVersion:\nArchitecture: all\n", "missing Version field"},
		{"Package: A1\nVersion: 1\nArchitecture: all\n", "bad Package field"},
		{"Package: a\nVersion: 1\nArchitecture: all\n", "bad Package field"},
		{"Package: ../x\nVersion: 1\nArchitecture: all\n", "bad Package field"},
		{"Package: a1\nVersion: 1 2\nArchitecture: all\n", "bad Version field"},
		{"Package: a1\nVersion: 1/2\nArchitecture: all\n", "bad Version field"},
		{"Package: a1\nVersion: 1\nArchitecture: amd64 i386\n", "bad Architecture field"},
		{"Package: a1\nVersion: 1\n multi\nArchitecture: all\n", "bad Version field"},
	}
	for _, tt := range tests {
		p, err := ParseControl([]byte(tt.in))
		if err != nil {
			t.Fatalf("ParseControl(%q): %v", tt.in, err)
		}
		_, _, _, err = p.identity()
		if tt.wantErr == "" && err != nil {
			t.Errorf("identity of %q: %v", tt.in, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("identity of %q: error %v, want %q", tt.in, err, tt.wantErr)
		}
	}
}
