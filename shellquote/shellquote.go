// Package shellquote quotes strings as words of a POSIX shell command
// line. Every command the provisioner sends into the image and every
// script the mkosi generator writes quotes its values with it, so that a
// path, a package version or a passphrase variable's name reaches the
// command as one word, whatever it holds.
package shellquote

import "strings"

// Quote returns s as one single-quoted shell word. Inside single quotes
// sh expands nothing, so only the quote itself needs care: it closes the
// quotes, adds an escaped quote and opens them again.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Word returns s unquoted where sh would read it as the same single word
// (letters, digits and @%+=:,./_-), and quoted otherwise. Command logs
// read better without quotes around plain paths and names.
func Word(s string) string {
	if s != "" && strings.IndexFunc(s, special) < 0 {
		return s
	}
	return Quote(s)
}

// special reports whether sh gives r a meaning, or might.
func special(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./_-", r))
}

// Join quotes each word with Quote and joins them with blanks.
func Join(words ...string) string {
	return join(Quote, words)
}

// JoinWords quotes each word with Word and joins them with blanks.
func JoinWords(words ...string) string {
	return join(Word, words)
}

func join(quote func(string) string, words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = quote(w)
	}
	return strings.Join(q, " ")
}
