package memstore

// Remembers reports whether s keeps any state of name, for the conformance
// suite.
func Remembers(s *Store, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.names[name]
	return ok
}
