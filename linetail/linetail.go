// Package linetail splits a command's output into lines as it is written
// and keeps the last of them, for the error message of a command that
// failed.
package linetail

import (
	"bytes"
	"strings"
	"sync"
)

// Writer is an io.Writer of a command's output. The zero value keeps the
// last 15 lines and passes none on.
type Writer struct {
	// Keep is how many lines Lines returns at most; 0 for 15.
	Keep int
	// Each, if set, gets every complete line as it arrives.
	Each func(line string)

	mu      sync.Mutex
	partial []byte
	last    []string
}

func (w *Writer) keep() int {
	if w.Keep > 0 {
		return w.Keep
	}
	return 15
}

// Write splits p into lines. A progress counter that redraws its line
// after each \r counts as its last state.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimRight(string(w.partial[:i]), "\r")
		line = line[strings.LastIndexByte(line, '\r')+1:]
		w.partial = w.partial[i+1:]
		if w.Each != nil {
			w.Each(line)
		}
		w.last = append(w.last, line)
		if len(w.last) > w.keep() {
			w.last = w.last[len(w.last)-w.keep():]
		}
	}
	return len(p), nil
}

// Lines are the last lines written, an unfinished one included.
func (w *Writer) Lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := append([]string(nil), w.last...)
	if len(w.partial) > 0 {
		lines = append(lines, string(w.partial))
	}
	if len(lines) > w.keep() {
		lines = lines[len(lines)-w.keep():]
	}
	return lines
}
