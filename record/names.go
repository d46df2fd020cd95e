package record

// MaxNameLen bounds a run id or a step id in a path.
const MaxNameLen = 128

// ValidName reports whether s can name a run or a step in the state
// directory: the factory file's rule for ids (a letter or digit, then
// letters, digits, '_', '.', '-'), so never a separator, a NUL, "." or
// "..". Callers check it after any decoding (an API path's %2F or %2e%2e).
func ValidName(s string) bool {
	if s == "" || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}
