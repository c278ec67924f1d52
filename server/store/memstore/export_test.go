package memstore

// Remembers reports whether s keeps any state of name, for the conformance
// suite.
func Remembers(s *Store, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.names[name]
	return ok
}

// Crash stops s as a kill -9 would: the writer stops, the state file keeps
// its last write, and the directory is unlocked (by the process's end).
func Crash(s *Store) {
	b := s.bounds
	s.mu.Lock()
	b.closed = true
	s.mu.Unlock()
	close(b.stop)
	<-b.done
	_ = b.dir.Close()
}

// Bounds lead the grants by at most these: what a crash adds to the wait.
const EndLead = endLead

// WaitWritten waits until s has written every lease granted so far; a write
// must be due (a tick passed, or a grant asked for one).
func WaitWritten(s *Store) {
	for {
		s.mu.Lock()
		b := s.bounds
		if !b.dirty && !b.demanded && !b.writing {
			s.mu.Unlock()
			return
		}
		written := b.written
		s.mu.Unlock()
		<-written
	}
}
