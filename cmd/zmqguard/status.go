package main

import (
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"time"
)

// statusWriter carries the demo's live one-line status on stderr together
// with the log lines. On a terminal the status line is redrawn in place with
// \r, and a log line first clears it and then redraws it below; elsewhere
// each status update is a line of its own.
type statusWriter struct {
	mu   sync.Mutex
	w    io.Writer
	term bool
	// json makes each status update a JSON object on a line of its own,
	// like the log lines under --log-format json (never redrawn in place).
	json bool
	line string // the status line currently shown (terminal only)
}

// deathsText renders, for the demo's table, after how many probes a port
// stopped answering.
func deathsText(n uint64) string {
	switch n {
	case 0:
		return "every port answered after every probe"
	case 1:
		return "a port stopped answering after 1 probe"
	}
	return "ports stopped answering after " + strconv.FormatUint(n, 10) + " probes"
}

const clearLine = "\r\x1b[K"

// Write writes a log line, keeping the status line below it.
func (s *statusWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term && !s.json && s.line != "" {
		io.WriteString(s.w, clearLine)
	}
	n, err := s.w.Write(p)
	if s.term && !s.json && s.line != "" {
		io.WriteString(s.w, s.line)
	}
	return n, err
}

// Set shows line as the current status.
func (s *statusWriter) Set(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.json {
		b, _ := json.Marshal(struct {
			Time   string `json:"time"`
			Level  string `json:"level"`
			Msg    string `json:"msg"`
			Status string `json:"status"`
		}{time.Now().Format(time.RFC3339Nano), "INFO", "demo status", line})
		s.w.Write(append(b, '\n'))
		return
	}
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
