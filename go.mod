module github.com/asyncagents/asyncagents

go 1.24.0

require (
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/google/go-cmp v0.7.0
	github.com/google/jsonschema-go v0.4.3
	github.com/tmaxmax/go-sse v0.11.0
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.41.0
)

require golang.org/x/sync v0.19.0
