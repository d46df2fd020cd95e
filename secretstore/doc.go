// Package secretstore keeps values set with `kusaw config set KEY --secret`
// in a file readable only by the user, outside every sandbox. Values are
// never printed or logged.
package secretstore
