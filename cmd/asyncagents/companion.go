package main

import (
	_ "embed"
	"encoding/json"
	"strings"
)

// companionSource is the plugin `asyncagents install` writes to OpenCode's global plugin
// folder, with its placeholders left in; companionPlugin fills them.
//
//go:embed companion.js
var companionSource string

// companionName is the plugin's file name in OpenCode's plugin folder, and companionMark a
// line only that plugin has: uninstall removes a file there only when it has the mark.
const (
	companionName = "asyncagents.js"
	companionMark = "// The asyncagents plugin for OpenCode, written by `asyncagents install`"
)

// companionPlugin returns the plugin's source for a daemon on socket, started with the
// command start (the program and its arguments) when none answers, for this version of
// asyncagents: the plugin announces its version, which the daemon checks.
func companionPlugin(socket string, start []string, version string) string {
	lit := func(v any) string {
		b, _ := json.Marshal(v) // a JavaScript literal
		return string(b)
	}
	return strings.NewReplacer("SOCKET_PATH", lit(socket), "START_COMMAND", lit(start),
		"VERSION_TEXT", lit(version), "(version VERSION)", "(version "+version+")").Replace(companionSource)
}
