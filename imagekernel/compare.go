package imagekernel

import "strings"

// Compare orders two kernel releases as dpkg orders versions (epoch, then
// upstream and revision, ~ before everything), the order dpkg
// --compare-versions gives the mkosi scripts.
func Compare(a, b string) int {
	ea, ra := splitEpoch(a)
	eb, rb := splitEpoch(b)
	if c := compareNum(ea, eb); c != 0 {
		return c
	}
	ua, va := splitRevision(ra)
	ub, vb := splitRevision(rb)
	if c := compareFragment(ua, ub); c != 0 {
		return c
	}
	return compareFragment(va, vb)
}

func splitEpoch(v string) (string, string) {
	if e, rest, ok := strings.Cut(v, ":"); ok && isDigits(e) {
		return e, rest
	}
	return "0", v
}

func splitRevision(v string) (string, string) {
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		return v[:i], v[i+1:]
	}
	return v, ""
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

func compareNum(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// order is dpkg's character weight: ~ first, then end of string, letters,
// then everything else.
func order(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return 0
	case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		return int(c)
	case c == '~':
		return -1
	}
	return int(c) + 256
}

func compareFragment(a, b string) int {
	for a != "" || b != "" {
		// Non-digit prefix.
		for (a != "" && !isDigit(a[0])) || (b != "" && !isDigit(b[0])) {
			ca, cb := 0, 0
			if a != "" && !isDigit(a[0]) {
				ca = order(a[0])
			}
			if b != "" && !isDigit(b[0]) {
				cb = order(b[0])
			}
			if ca != cb {
				if ca < cb {
					return -1
				}
				return 1
			}
			if a != "" && !isDigit(a[0]) {
				a = a[1:]
			}
			if b != "" && !isDigit(b[0]) {
				b = b[1:]
			}
		}
		// Digit run.
		i, j := 0, 0
		for i < len(a) && isDigit(a[i]) {
			i++
		}
		for j < len(b) && isDigit(b[j]) {
			j++
		}
		if c := compareNum(a[:i], b[:j]); c != 0 {
			return c
		}
		a, b = a[i:], b[j:]
	}
	return 0
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
