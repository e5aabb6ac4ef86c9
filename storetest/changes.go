package storetest

import (
	"context"
	"errors"

	"github.com/asyncagents/asyncagents"
)

// Changes is not implemented yet: it returns an error.
func (s *SharedStore) Changes(ctx context.Context, after uint64, limit int) ([]asyncagents.Change, uint64, error) {
	return nil, after, errors.New("storetest: Changes is not implemented yet")
}
