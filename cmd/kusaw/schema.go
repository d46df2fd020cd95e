package main

import (
	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/config"
)

func init() { addCommand("schema", newSchemaCmd) }

func newSchemaCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "print the JSON Schema (draft 2020-12) of factory.yaml, for editors",
		Long: `Prints the JSON Schema of factory.yaml: every key, its type and allowed
values, with a description. It is built from the same definitions kusaw
validate reads the file with (a test fails when the two disagree), and
docs/reference/factory.schema.json is a copy (a test fails when it is
stale). kusaw init saves it in the state folder and points the file's
first line at it, for editors using the YAML language server:

    # yaml-language-server: $schema=.kusaw/factory.schema.json

The schema finds unknown keys, wrong types and values; kusaw validate also
checks what a schema cannot: paths, git repositories, references between
keys, host patterns and the rules that span keys.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			_, err := a.stdout.Write(config.JSONSchema())
			return err
		},
	}
}
