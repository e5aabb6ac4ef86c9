package pgstore

import (
	"context"
	"errors"

	"github.com/asyncagents/asyncagents"
)

// Changes is not implemented yet: it returns an error.
func (s *Store) Changes(ctx context.Context, after uint64, limit int) ([]asyncagents.Change, uint64, error) {
	return nil, after, errors.New("pgstore: Changes is not implemented yet")
}
