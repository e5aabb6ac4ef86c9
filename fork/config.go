package fork

import (
	"errors"
	"fmt"
)

// Defaults of the pipeline options. Limits are in characters (Unicode code points).
const (
	// DefaultWholeResults is how many of the newest tool results are kept whole (tier 1).
	DefaultWholeResults = 5
	// DefaultTierTwoResults is how many results after those are cut to the tier-2 limit
	// (tier 2); every older result is in tier 3.
	DefaultTierTwoResults = 10
	// DefaultTierTwoLimit is the length a tier-2 result is cut to.
	DefaultTierTwoLimit = 3000
	// DefaultTierThreeLimit is the length a tier-3 result is cut to.
	DefaultTierThreeLimit = 500

	// DefaultParamLimitTier1 is the length a tool call's parameters are cut to when its
	// result is in tier 1, and for a call that is still pending or running.
	DefaultParamLimitTier1 = 500
	// DefaultParamLimitTier2 is the length a tool call's parameters are cut to when its
	// result is in tier 2.
	DefaultParamLimitTier2 = 200
	// DefaultParamLimitTier3 is the length a tool call's parameters are cut to when its
	// result is in tier 3, and for a call whose result OpenCode compacted.
	DefaultParamLimitTier3 = 100

	// DefaultNoTruncateTool is the one entry of the default no-truncation list: results
	// of tools whose name contains it are never cut.
	DefaultNoTruncateTool = "ask_user_questions"

	// DefaultBudget is the most characters the whole context may have, tags included.
	DefaultBudget = 200_000
	// MinBudget is the smallest budget New accepts.
	MinBudget = 1000
)

// ErrInvalidOption is matched (with [errors.Is]) by the error [New] returns for a bad
// option value.
var ErrInvalidOption = errors.New("fork: invalid option")

type config struct {
	whole, tierTwo         int
	tierTwoLim, tierThrLim int
	paramLimits            [3]int // by tier: 1, 2, 3
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
		paramLimits: [3]int{DefaultParamLimitTier1, DefaultParamLimitTier2, DefaultParamLimitTier3},
		noTruncate:  []string{DefaultNoTruncateTool},
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

// Option configures a [Pipeline]; pass options to [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTiers sets how many of the newest tool results are kept whole (tier 1; defaults to
// [DefaultWholeResults]) and how many after those are cut to the tier-2 limit (tier 2;
// defaults to [DefaultTierTwoResults]); every older result is cut to the tier-3 limit.
// Both must be ≥ 0.
func WithTiers(whole, tierTwo int) Option {
	return optionFunc(func(c *config) { c.whole, c.tierTwo = whole, tierTwo })
}

// WithTierLimits sets the lengths in characters that tier-2 and tier-3 results are cut to
// (default to [DefaultTierTwoLimit] and [DefaultTierThreeLimit]). Both must be ≥ 0.
func WithTierLimits(tierTwo, tierThree int) Option {
	return optionFunc(func(c *config) { c.tierTwoLim, c.tierThrLim = tierTwo, tierThree })
}

// WithParamLimits sets the lengths in characters that a tool call's parameters are cut to
// when its result is in tier 1, 2 or 3 (default to [DefaultParamLimitTier1],
// [DefaultParamLimitTier2] and [DefaultParamLimitTier3]). A pending or running call uses
// the tier-1 limit, a call whose result was compacted the tier-3 limit. All must be ≥ 0.
func WithParamLimits(tierOne, tierTwo, tierThree int) Option {
	return optionFunc(func(c *config) { c.paramLimits = [3]int{tierOne, tierTwo, tierThree} })
}

// WithNoTruncateTools replaces the list of tools whose results are never cut: a tool is
// exempt when its name contains an entry. Defaults to the one entry
// [DefaultNoTruncateTool]; no names exempts nothing. Entries must not be empty. An exempt
// result still counts in its tier.
func WithNoTruncateTools(names ...string) Option {
	return optionFunc(func(c *config) { c.noTruncate = append([]string(nil), names...) })
}

// WithBudget sets the length in characters of the whole context, tags included (defaults
// to [DefaultBudget]; must be at least [MinBudget]).
func WithBudget(chars int) Option {
	return optionFunc(func(c *config) { c.budget = chars })
}

// WithTailAware turns tail-aware slicing on or off (defaults to off). When the latest
// compaction names the first message of its tail (tail_start_id), the context shows the
// summary, then the messages from that one up to the compaction, then the messages after
// the summary — the order in which OpenCode itself shows them to the model. Off, the tail
// is dropped with everything else before the summary.
func WithTailAware(on bool) Option {
	return optionFunc(func(c *config) { c.tailAware = on })
}
