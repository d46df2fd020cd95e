package serve

import (
	"embed"
	"io/fs"
	"net/http"
)

// The web page: static files embedded in the binary (no CDN, nothing
// fetched from elsewhere); the page reads the same API as the CLI.
//
//go:embed web
var webFiles embed.FS

func (s *Server) webRoutes(mux *http.ServeMux) {
	sub, _ := fs.Sub(webFiles, "web")
	static := http.FileServer(http.FS(sub))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		webHeaders(w)
		http.ServeFileFS(w, r, sub, "index.html")
	})
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		webHeaders(w)
		static.ServeHTTP(w, r)
	})))
}

// webHeaders: the page loads only its own files and talks only to serve.
func webHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}
