module github.com/asyncagents/asyncagents

go 1.24
