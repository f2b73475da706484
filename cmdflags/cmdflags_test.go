package cmdflags

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		allowArgs bool
		usage     bool // the flag set has its own Usage
		wantCode  int
		wantOK    bool
		want      []string
		wantNot   []string
	}{
		{"flags only", []string{"--level", "3"}, false, false, 0, true, nil, nil},
		{"help", []string{"--help"}, false, true, 0, false, []string{"Usage: demo"}, []string{"unknown"}},
		{"unknown flag, own usage", []string{"--bogus"}, false, true, 2, false,
			[]string{"demo sub: unknown flag: --bogus", "Usage: demo", "--level", "'packer-plugin-podvm demo sub --help'"}, nil},
		{"unknown flag, default usage", []string{"--bogus"}, false, false, 2, false,
			[]string{"demo sub: unknown flag: --bogus", "Usage of packer-plugin-podvm demo sub:", "--level"}, nil},
		{"missing value", []string{"--level"}, false, false, 2, false, []string{"demo sub: flag needs an argument: --level"}, nil},
		{"bad value", []string{"--level", "x"}, false, false, 2, false, []string{`invalid argument "x"`}, nil},
		{"stray argument refused", []string{"extra"}, false, false, 2, false,
			[]string{`demo sub: unexpected argument "extra": it takes flags only`}, []string{"Usage"}},
		{"stray argument allowed", []string{"--level", "1", "extra"}, true, false, 0, true, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			fs := pflag.NewFlagSet("demo sub", pflag.ContinueOnError)
			level := fs.Int("level", 0, "how much")
			if tt.usage {
				fs.Usage = func() {
					stderr.WriteString("Usage: demo\n")
					fs.PrintDefaults()
				}
			}
			code, ok := Parse(fs, tt.args, tt.allowArgs, &stderr)
			if code != tt.wantCode || ok != tt.wantOK {
				t.Errorf("Parse(%q) = %d, %v; want %d, %v", tt.args, code, ok, tt.wantCode, tt.wantOK)
			}
			out := stderr.String()
			if tt.wantOK && out != "" {
				t.Errorf("Parse(%q) printed %q on success", tt.args, out)
			}
			if tt.wantOK && tt.args[0] == "--level" && *level != int(tt.args[1][0]-'0') {
				t.Errorf("--level = %d after %q", *level, tt.args)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("stderr lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("stderr has %q:\n%s", w, out)
				}
			}
		})
	}
}
