// The sizes a planned batch.pack packs by (exec/pack_planner.h): each sample's token
// count as the chain's size pass tells it (ops/op.h TellRows: image.decode from the
// header, smart_resize, patchify's grid, text.tokenize's tokens), from its record and
// its media read whole through the source's storage. Nothing is decoded. On the caller's
// thread (the engine's driver), a batch's reads issued at once and waited for together.
#pragma once

#include <memory>

#include "headrace/exec/engine.h"
#include "headrace/exec/pack_planner.h"

namespace headrace {

// Whether a planned pack can size the samples of `inputs`: one chain, whose ops up to its
// text.tokenize all tell (Op::Tells), text.tokenize among them.
bool ChainTellsTokens(const EngineInputs& inputs);

// The sizer over `inputs` (kept alive by it): the rows of batch field `token_field` told
// for each sample, and where `pack`'s vision token ids lie among them (past
// pack.seq_len); nullopt for a sample whose record, reads or size pass fail.
PackPlanner::Sizer SizeByTheSizePass(std::shared_ptr<const EngineInputs> inputs,
                                     int token_field, const PackOptions& pack);

}  // namespace headrace
