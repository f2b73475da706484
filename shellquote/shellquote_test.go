package shellquote

import (
	"os/exec"
	"strings"
	"testing"
)

var hostile = []string{
	"",
	"plain",
	"two words",
	"it's",
	"''",
	`"double"`,
	"$HOME",
	"${x:-y}",
	"`id`",
	"$(id)",
	"a\nb",
	"\n",
	"tab\there",
	`back\slash`,
	"*?[a]",
	"~user",
	"#comment",
	"a;b&c|d",
	"<in >out",
	"-n",
	"é ü",
}

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, quote, word string }{
		{"", "''", "''"},
		{"plain", "'plain'", "plain"},
		{"/opt/local-packages", "'/opt/local-packages'", "/opt/local-packages"},
		{"nvidia-driver=550.163.01-2", "'nvidia-driver=550.163.01-2'", "nvidia-driver=550.163.01-2"},
		{"it's", `'it'\''s'`, `'it'\''s'`},
		{"$HOME", "'$HOME'", "'$HOME'"},
		{"a b", "'a b'", "'a b'"},
		{"~", "'~'", "'~'"},
	} {
		if got := Quote(tc.in); got != tc.quote {
			t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.quote)
		}
		if got := Word(tc.in); got != tc.word {
			t.Errorf("Word(%q) = %s, want %s", tc.in, got, tc.word)
		}
	}
	if got, want := Join("a", "b c", ""), `'a' 'b c' ''`; got != want {
		t.Errorf("Join = %s, want %s", got, want)
	}
	if got, want := JoinWords("a", "b c", ""), `a 'b c' ''`; got != want {
		t.Errorf("JoinWords = %s, want %s", got, want)
	}
}

// TestRoundTrip has sh read each quoted word back: printf prints each of
// its arguments between markers, so a word that sh split, expanded or
// dropped shows.
func TestRoundTrip(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	for name, quote := range map[string]func(...string) string{"Join": Join, "JoinWords": JoinWords} {
		script := "printf '<%s>' " + quote(hostile...)
		out, err := exec.Command("sh", "-c", script).Output()
		if err != nil {
			t.Fatalf("%s: sh -c %s: %v", name, script, err)
		}
		want := "<" + strings.Join(hostile, "><") + ">"
		if string(out) != want {
			t.Errorf("%s: sh read\n%q\nwant\n%q", name, out, want)
		}
	}
}
