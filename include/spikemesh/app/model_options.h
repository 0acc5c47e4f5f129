// model_options.h — the model-selection flags shared by every subcommand that builds a model
// (model, dump-grads, bench; train registers the same names through TrainConfigResolver):
//   --model NAME | --model-spec FILE   (exactly one)
//   --var NAME=INT ...                 spec variable overrides (e.g. C=16)
//   --T N (N >= 1), --dropout P        spec overrides
// They fill a ModelSelection (models/model_selection.h), which validates and builds.
#pragma once
#include "spikemesh/models/model_selection.h"

namespace CLI {
class App;
}

namespace sm {

// Adds the flags above to `cmd`, bound to `sel` (which must outlive `cmd`'s parse);
// require_T makes --T mandatory. A --T below 1 is a parse error naming --T.
void add_model_options(CLI::App& cmd, ModelSelection& sel, bool require_T = false);

}  // namespace sm
