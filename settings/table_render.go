package settings

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// settingDoc is a setting as the options command and the docs show it.
type settingDoc struct {
	Key     string   `json:"hcl_key"`
	Env     string   `json:"env"`
	Flag    string   `json:"flag"`
	Type    string   `json:"type"`
	Default string   `json:"default"`
	Allowed string   `json:"allowed"`
	Values  []string `json:"values,omitempty"`
	Section string   `json:"section"`
	Help    string   `json:"help"`
}

func docs() []settingDoc {
	out := make([]settingDoc, len(Table))
	for i := range Table {
		s := &Table[i]
		out[i] = settingDoc{
			Key: s.Key, Env: s.Env, Flag: "--" + s.Flag, Type: s.Kind.String(),
			Default: s.DefaultText(), Allowed: s.AllowedText(), Section: s.Section, Help: s.Help,
		}
		if s.Kind == Enum || s.Kind == Bool {
			out[i].Values = s.Allowed
		}
	}
	return out
}

// WriteTable prints the settings table as text, markdown or json.
func WriteTable(w io.Writer, format string) error {
	switch format {
	case "text":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "HCL KEY\tENVIRONMENT\tFLAG\tTYPE\tDEFAULT\tALLOWED")
		for _, d := range docs() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Key, d.Env, d.Flag, d.Type, d.Default, d.Allowed)
		}
		return tw.Flush()
	case "markdown":
		section := ""
		for _, d := range docs() {
			if d.Section != section {
				if section != "" {
					fmt.Fprintln(w)
				}
				section = d.Section
				fmt.Fprintf(w, "### %s\n\n", sectionTitles[section])
				fmt.Fprintln(w, "| HCL key | Environment | Flag | Type | Default | Allowed | Description |")
				fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
			}
			fmt.Fprintf(w, "| `%s` | `%s` | `%s` | %s | %s | %s | %s |\n",
				d.Key, d.Env, d.Flag, d.Type, mdEscape(d.Default), mdEscape(d.Allowed), mdEscape(d.Help))
		}
		return nil
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(docs())
	}
	return fmt.Errorf("--format: invalid value %q; allowed: text|markdown|json", format)
}

var sectionTitles = map[string]string{
	"podvm":    "Pod VM agent stack",
	"gpu":      "GPU driver",
	"toolkit":  "Container toolkit",
	"extras":   "Extras",
	"repo":     "Node-local apt repository",
	"operator": "GPU Operator objects",
	"build":    "Build",
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}
