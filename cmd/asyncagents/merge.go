package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// member is one member of a JSON object, in the order of the document.
type member struct {
	key   string
	value json.RawMessage
}

// readObject reads a JSON object's members in order; duplicate keys are an error.
func readObject(data []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var ms []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string) // the decoder only yields strings as object keys
		if seen[key] {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		ms = append(ms, member{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("text after the JSON object")
	}
	return ms, nil
}

// writeObject writes members as an indented JSON object (two spaces), ending in a newline.
func writeObject(ms []member) []byte {
	var b bytes.Buffer
	b.WriteString("{")
	for i, m := range ms {
		if i > 0 {
			b.WriteString(",")
		}
		k, _ := json.Marshal(m.key)
		b.WriteString("\n  ")
		b.Write(k)
		b.WriteString(": ")
		if err := json.Indent(&b, m.value, "  ", "  "); err != nil {
			b.Write(m.value) // read by readObject, so valid JSON: not reached
		}
	}
	if len(ms) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// mergeMCP returns the config file text cfg (empty for none) with entry as mcp.<name>, and
// what happened to the entry: "added", "unchanged", "replaced" (force) or "differs" (an
// entry of that name that differs, left alone). Every other member keeps its place and value.
func mergeMCP(cfg []byte, name string, entry json.RawMessage, force bool) ([]byte, string, error) {
	var top []member
	if len(bytes.TrimSpace(cfg)) > 0 {
		var err error
		if top, err = readObject(cfg); err != nil {
			return nil, "", fmt.Errorf("not plain JSON (%v): add the entry above by hand", err)
		}
	} else {
		top = []member{{"$schema", json.RawMessage(`"https://opencode.ai/config.json"`)}}
	}
	mi := -1
	for i, m := range top {
		if m.key == "mcp" {
			mi = i
		}
	}
	var servers []member
	if mi >= 0 {
		var err error
		if servers, err = readObject(top[mi].value); err != nil {
			return nil, "", fmt.Errorf(`"mcp": %v`, err)
		}
	}
	action := "added"
	si := -1
	for i, s := range servers {
		if s.key == name {
			si = i
		}
	}
	if si >= 0 {
		switch {
		case jsonEqual(servers[si].value, entry):
			return cfg, "unchanged", nil
		case !force:
			return cfg, "differs", nil
		}
		servers[si].value, action = entry, "replaced"
	} else {
		servers = append(servers, member{name, entry})
	}
	mcp := bytes.TrimSpace(writeObject(servers))
	if mi >= 0 {
		top[mi].value = mcp
	} else {
		top = append(top, member{"mcp", mcp})
	}
	return writeObject(top), action, nil
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
