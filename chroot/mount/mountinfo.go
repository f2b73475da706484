package mount

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

const mountinfoPath = "/proc/self/mountinfo"

func readMountinfo() ([]string, error) {
	f, err := os.Open(mountinfoPath)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	mps, err := parseMountinfo(f)
	if err != nil {
		return nil, fmt.Errorf("read mount table %s: %w", mountinfoPath, err)
	}
	return mps, nil
}

// parseMountinfo returns the mount points of a proc(5) mountinfo table, in
// table order. The mount point is the fifth field.
func parseMountinfo(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		out = append(out, unescape(fields[4]))
	}
	return out, sc.Err()
}

// unescape undoes the kernel's octal escaping of space, tab, newline and
// backslash (\040, \011, \012, \134) in mountinfo paths.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
