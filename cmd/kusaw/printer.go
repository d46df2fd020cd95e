package main

import (
	"encoding/json"
	"fmt"
	"io"
)

// printer prints what a command found, as text or as JSON (--json): the
// command decides, the printer only prints. kusaw run and kusaw show have
// printers of their own shape (runPrinter, showPrinter); the commands
// that print one value use this one.
type printer[T any] interface{ Print(T) }

// newPrinter is the JSON printer with jsonOut, else text's.
func newPrinter[T any](w io.Writer, jsonOut bool, text func(io.Writer, T)) printer[T] {
	if jsonOut {
		return jsonPrinter[T]{w}
	}
	return textPrinter[T]{w, text}
}

// jsonPrinter prints the value indented, on lines of its own.
type jsonPrinter[T any] struct{ w io.Writer }

func (p jsonPrinter[T]) Print(v T) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintf(p.w, "%s\n", b)
}

type textPrinter[T any] struct {
	w    io.Writer
	text func(io.Writer, T)
}

func (p textPrinter[T]) Print(v T) { p.text(p.w, v) }
