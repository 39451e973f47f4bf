package main

import (
	"io"
	"sync"
)

// statusWriter carries the demo's live one-line status on stderr together
// with the log lines. On a terminal the status line is redrawn in place with
// \r, and a log line first clears it and then redraws it below; elsewhere
// each status update is a line of its own.
type statusWriter struct {
	mu   sync.Mutex
	w    io.Writer
	term bool
	line string // the status line currently shown (terminal only)
}

const clearLine = "\r\x1b[K"

// Write writes a log line, keeping the status line below it.
func (s *statusWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term && s.line != "" {
		io.WriteString(s.w, clearLine)
	}
	n, err := s.w.Write(p)
	if s.term && s.line != "" {
		io.WriteString(s.w, s.line)
	}
	return n, err
}

// Set shows line as the current status.
func (s *statusWriter) Set(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term {
		io.WriteString(s.w, clearLine+line)
		s.line = line
		return
	}
	io.WriteString(s.w, line+"\n")
}

// Done removes the status line, leaving the last one visible on a terminal.
func (s *statusWriter) Done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term && s.line != "" {
		io.WriteString(s.w, "\n")
	}
	s.line = ""
}
