package discovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/kvevents"
)

// File discovers engines listed in a file, one per line:
//
//	# comment (from '#' to the end of the line)
//	tcp://10.0.0.5:5557 tcp://10.0.0.5:5558
//	tcp://10.0.0.6:5557
//
// LIVE, then optionally REPLAY, separated by blanks; each source is named
// by its LIVE endpoint (tcp://HOST:PORT or ipc://PATH). The file is
// re-read when it changes: its size, modification time or identity
// (device and inode) as os.Stat sees them every Interval, so that a file
// replaced by a rename (what editors, and Kubernetes when it updates a
// mounted ConfigMap, do) is seen as well as one written in place, with no
// file-watching dependency. A bad line (a bad endpoint, more than two
// fields, a LIVE listed before) is logged with its number and left out;
// the other lines apply. A file that cannot be read (missing for a while,
// as in the middle of a replacement, or unreadable) or is larger than
// 1 MiB changes nothing: the previous set stays, and it is logged. To
// retire every engine, leave the file empty (or only comments). Replace
// the file by a rename to change it atomically: a file written in place
// can be read half-written, which is a change like any other (an engine
// missing from what was read leaves, and joins again at the next read).
type File struct {
	// Path is the file's path (followed through symbolic links).
	Path string
	// Interval is how often the file is checked for a change. Zero means
	// 1 s.
	Interval time.Duration
	// Logger receives bad lines and read failures; nil means
	// slog.Default().
	Logger *slog.Logger
}

// maxFileBytes bounds the sources file read.
const maxFileBytes = 1 << 20

// maxEndpoint bounds an endpoint's length.
const maxEndpoint = 1024

// lineError is a bad line of a sources file.
type lineError struct {
	line int
	err  error
}

func (e lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }

// parseSources reads a sources file's content: the sources of its good
// lines, in order, and one error per bad line.
func parseSources(data []byte) ([]kvevents.Source, []lineError) {
	var out []kvevents.Source
	var bad []lineError
	seen := map[string]int{}
	n := 0
	for len(data) > 0 {
		n++
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(string(line))
		if len(fields) == 0 {
			continue
		}
		if len(fields) > 2 {
			bad = append(bad, lineError{n, fmt.Errorf("%d fields, want LIVE [REPLAY]", len(fields))})
			continue
		}
		src := kvevents.Source{Live: fields[0]}
		if len(fields) == 2 {
			src.Replay = fields[1]
		}
		if err := checkEndpoint(src.Live); err != nil {
			bad = append(bad, lineError{n, fmt.Errorf("live endpoint: %w", err)})
			continue
		}
		if src.Replay != "" {
			if err := checkEndpoint(src.Replay); err != nil {
				bad = append(bad, lineError{n, fmt.Errorf("replay endpoint: %w", err)})
				continue
			}
		}
		if first, ok := seen[src.Live]; ok {
			bad = append(bad, lineError{n, fmt.Errorf("%s listed before, on line %d", ratelog.Escape(src.Live, 128), first)})
			continue
		}
		seen[src.Live] = n
		src.Name = src.Live
		out = append(out, src)
	}
	return out, bad
}

// checkEndpoint accepts tcp://HOST:PORT (PORT 1..65535, HOST not empty
// and not "*": the subscriber dials it) and ipc://PATH.
func checkEndpoint(ep string) error {
	if len(ep) > maxEndpoint {
		return fmt.Errorf("%s...: longer than %d bytes", ratelog.Escape(ep[:64], 64), maxEndpoint)
	}
	for i := 0; i < len(ep); i++ {
		if c := ep[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%s: a byte outside printable ASCII", ratelog.Escape(ep, 128))
		}
	}
	switch {
	case strings.HasPrefix(ep, "ipc://"):
		if len(ep) == len("ipc://") {
			return fmt.Errorf("%s: no path", ep)
		}
		return nil
	case strings.HasPrefix(ep, "tcp://"):
		host, port, err := net.SplitHostPort(ep[len("tcp://"):])
		if err != nil {
			return fmt.Errorf("%s: want tcp://HOST:PORT", ep)
		}
		if host == "" || host == "*" {
			return fmt.Errorf("%s: no host to connect to", ep)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("%s: port %q, want 1..65535", ep, port)
		}
		return nil
	}
	return fmt.Errorf("%s: want tcp://HOST:PORT or ipc://PATH", ratelog.Escape(ep, 128))
}

// changed reports whether the file b is not the file a was, or was
// written since.
func changed(a, b os.FileInfo) bool {
	return !os.SameFile(a, b) || a.Size() != b.Size() || !a.ModTime().Equal(b.ModTime())
}

// Discover reads the file at once and again whenever it changes, and sends
// the sources of its good lines each time (see File). It returns nil when
// ctx ends, or at once an error naming a bad field.
func (f File) Discover(ctx context.Context, sets chan<- []kvevents.Source) error {
	if f.Path == "" {
		return errors.New("discovery: File.Path is empty")
	}
	if f.Interval < 0 {
		return fmt.Errorf("discovery: File.Interval %v is negative", f.Interval)
	}
	interval := f.Interval
	if interval == 0 {
		interval = time.Second
	}
	log := f.Logger
	if log == nil {
		log = slog.Default()
	}
	path := ratelog.Escape(f.Path, 256)
	var last os.FileInfo
	failing := false
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		fi, err := os.Stat(f.Path)
		if err != nil || last == nil || changed(last, fi) {
			if err == nil {
				var set []kvevents.Source
				set, err = f.read(log, path)
				if err == nil {
					select {
					case sets <- set:
					case <-ctx.Done():
						return nil
					}
				}
				if err == nil || errors.Is(err, errTooLarge) {
					// Read (or too large: not again until it changes).
					last = fi
				}
			}
			switch {
			case err != nil && !failing:
				failing = true
				log.Warn("discovery: sources file not read; the engines found before stay followed", "file", path,
					"err", ratelog.Escape(err.Error(), 512))
			case err == nil && failing:
				failing = false
				log.Info("discovery: sources file read again", "file", path)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

var errTooLarge = fmt.Errorf("larger than %d bytes", maxFileBytes)

// read reads and parses the file, logging each bad line.
func (f *File) read(log *slog.Logger, path string) ([]kvevents.Source, error) {
	fh, err := os.Open(f.Path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileBytes {
		return nil, errTooLarge
	}
	set, bad := parseSources(data)
	for _, b := range bad {
		log.Warn("discovery: sources file: bad line left out", "file", path, "line", b.line, "err", ratelog.Escape(b.err.Error(), 512))
	}
	if set == nil {
		set = []kvevents.Source{}
	}
	return set, nil
}
