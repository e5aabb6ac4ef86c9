package fork

import (
	"errors"
	"fmt"
)

// Defaults of the pipeline options (SPEC F-6, F-7, F-11, F-13).
const (
	DefaultWholeResults   = 5       // newest tool results kept whole (tier 1); must be ≥ 0
	DefaultTierTwoResults = 10      // next results cut to the tier-2 limit; must be ≥ 0
	DefaultTierTwoLimit   = 3000    // characters; must be ≥ 0
	DefaultTierThreeLimit = 500     // characters; must be ≥ 0
	DefaultBudget         = 200_000 // characters of the whole context; must be ≥ MinBudget
	MinBudget             = 1000    // the smallest budget accepted
)

// DefaultParamLimits are the tool-parameter limits in characters for results of tier 1, 2
// and 3 (SPEC F-11). A pending or running call uses the tier-1 limit, a call whose result
// was compacted the tier-3 limit.
var DefaultParamLimits = [3]int{500, 200, 100}

// DefaultNoTruncateTools lists the tools whose results are never cut (SPEC F-7).
var DefaultNoTruncateTools = []string{"ask_user_questions"}

// ErrInvalidOption is matched by the error New returns for a bad option value.
var ErrInvalidOption = errors.New("fork: invalid option")

type config struct {
	whole, tierTwo         int
	tierTwoLim, tierThrLim int
	paramLimits            [3]int
	noTruncate             []string
	budget                 int
	tailAware              bool
}

func defaultConfig() config {
	return config{
		whole:       DefaultWholeResults,
		tierTwo:     DefaultTierTwoResults,
		tierTwoLim:  DefaultTierTwoLimit,
		tierThrLim:  DefaultTierThreeLimit,
		paramLimits: DefaultParamLimits,
		noTruncate:  append([]string(nil), DefaultNoTruncateTools...),
		budget:      DefaultBudget,
	}
}

func (c *config) validate() error {
	switch {
	case c.whole < 0 || c.tierTwo < 0:
		return fmt.Errorf("%w: tier sizes %d and %d must not be negative", ErrInvalidOption, c.whole, c.tierTwo)
	case c.tierTwoLim < 0 || c.tierThrLim < 0:
		return fmt.Errorf("%w: tier limits %d and %d must not be negative", ErrInvalidOption, c.tierTwoLim, c.tierThrLim)
	case c.paramLimits[0] < 0 || c.paramLimits[1] < 0 || c.paramLimits[2] < 0:
		return fmt.Errorf("%w: parameter limits %v must not be negative", ErrInvalidOption, c.paramLimits)
	case c.budget < MinBudget:
		return fmt.Errorf("%w: budget %d is below the minimum %d characters", ErrInvalidOption, c.budget, MinBudget)
	}
	for _, n := range c.noTruncate {
		if n == "" {
			return fmt.Errorf("%w: empty tool name in the no-truncation list (it would match every tool)", ErrInvalidOption)
		}
	}
	return nil
}

// Option configures a Pipeline.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTiers sets how many of the newest tool results are kept whole (tier 1, default
// DefaultWholeResults) and how many after those are cut to the tier-2 limit (default
// DefaultTierTwoResults); older ones are cut to the tier-3 limit. Both must be ≥ 0.
func WithTiers(whole, tierTwo int) Option {
	return optionFunc(func(c *config) { c.whole, c.tierTwo = whole, tierTwo })
}

// WithTierLimits sets the tier-2 and tier-3 result limits in characters (defaults
// DefaultTierTwoLimit and DefaultTierThreeLimit). Both must be ≥ 0.
func WithTierLimits(tierTwo, tierThree int) Option {
	return optionFunc(func(c *config) { c.tierTwoLim, c.tierThrLim = tierTwo, tierThree })
}

// WithParamLimits sets the tool-parameter limits in characters for tiers 1, 2 and 3
// (default DefaultParamLimits). All must be ≥ 0.
func WithParamLimits(tierOne, tierTwo, tierThree int) Option {
	return optionFunc(func(c *config) { c.paramLimits = [3]int{tierOne, tierTwo, tierThree} })
}

// WithNoTruncateTools replaces the list of tools whose results are never cut: a tool is
// exempt when its name contains an entry (default DefaultNoTruncateTools). Entries must not
// be empty; no names exempts nothing.
func WithNoTruncateTools(names ...string) Option {
	return optionFunc(func(c *config) { c.noTruncate = append([]string(nil), names...) })
}

// WithBudget sets the character budget of the whole context (default DefaultBudget; at
// least MinBudget).
func WithBudget(chars int) Option {
	return optionFunc(func(c *config) { c.budget = chars })
}

// WithTailAware turns on tail-aware slicing (SPEC F-4, default off): after a compaction with
// tail_start_id, the context shows the summary, then the messages from tail_start_id up to
// the compaction, then the messages after the summary — what OpenCode itself shows the model.
func WithTailAware(on bool) Option {
	return optionFunc(func(c *config) { c.tailAware = on })
}
