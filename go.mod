module github.com/asyncagents/asyncagents

go 1.26.0

require (
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/google/jsonschema-go v0.4.3 // indirect
	github.com/tmaxmax/go-sse v0.11.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
