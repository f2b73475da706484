package cachedir

import (
	"fmt"
	"strconv"
	"strings"
)

// The build cache settings, shared by the settings table (package settings) and
// the podvm-rootfs builder, which may not import the GPU options: one
// parser each, so both accept the same values with the same messages.
const (
	ModeAuto = "auto" // where the build host holds the image
	ModeYes  = "yes"  // also for a remote VM
	ModeNo   = "no"   // no build cache

	// DefaultMaxSize is build_cache_max_size's default.
	DefaultMaxSize = "4GiB"

	// The settings' environment variables, which the settings table and
	// the podvm-rootfs builder read.
	EnvMode    = "PODVM_BUILD_CACHE"
	EnvDir     = "PODVM_BUILD_CACHE_DIR"
	EnvMaxSize = "PODVM_BUILD_CACHE_MAX_SIZE"

	// SizeHelp says what build_cache_max_size allows.
	SizeHelp = "a size such as 4GiB, 500MiB or 0 for no bound (units B, KiB, MiB, GiB, TiB; K, M, G, T are the same)"
)

// Modes are build_cache's values, in the order the docs show them.
var Modes = []string{ModeAuto, ModeYes, ModeNo}

// ParseMode reads build_cache: auto, yes or no in any case, blanks around
// it ignored; "" is auto.
func ParseMode(s string) (string, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	if v == "" {
		return ModeAuto, nil
	}
	for _, m := range Modes {
		if v == m {
			return m, nil
		}
	}
	return "", fmt.Errorf("build_cache: %q is not allowed; allowed: %s", s, strings.Join(Modes, ", "))
}

// ParseSize reads a size such as 4GiB or 500M as bytes. Units are powers
// of 1024; none means bytes.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: not a whole number of bytes with an optional unit", s)
	}
	shift := map[string]uint{"": 0, "B": 0, "K": 10, "KiB": 10, "M": 20, "MiB": 20, "G": 30, "GiB": 30, "T": 40, "TiB": 40}
	sh, ok := shift[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q", s, unit)
	}
	if n > (1<<62)>>sh {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n << sh, nil
}

// ParseMaxSize reads build_cache_max_size; "" is DefaultMaxSize. The
// error names the setting, the value and what is allowed.
func ParseMaxSize(s string) (int64, error) {
	if strings.TrimSpace(s) == "" {
		s = DefaultMaxSize
	}
	n, err := ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("build_cache_max_size: %w; allowed: %s", err, SizeHelp)
	}
	return n, nil
}

// Open resolves the build_cache_dir setting (Root) and checks the root
// (Trusted): the one decision every user of the build caches makes before
// it reads or writes one.
func Open(dir string) (string, error) {
	root, err := Root(dir)
	if err != nil {
		return "", err
	}
	if err := Trusted(root); err != nil {
		return "", err
	}
	return root, nil
}
