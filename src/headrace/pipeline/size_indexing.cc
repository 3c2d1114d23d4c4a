// SizeIndexing (prepared.h): the pipeline a size index is built from, and its build, for
// the CLI (`headrace index sizes`), Python (headrace.build_size_index) and Ray workers
// (headrace.ray.build_size_index: a range of samples each, joined by the driver).
#include <utility>

#include "headrace/pipeline/prepared.h"

namespace headrace {

Result<SizeIndexing> PrepareSizeIndexing(PipelineSpec spec, std::shared_ptr<Storage> storage) {
  SizeIndexing indexing;
  // The fingerprint of the pipeline as a balanced run checks its index against; the
  // pipeline prepared without batch.balance, whose index is what is being built.
  indexing.fingerprint = SizeFingerprint(spec);
  spec.batch.balance = {};
  HR_ASSIGN_OR_RETURN(indexing.prepared, PreparedPipeline::Make(spec, std::move(storage)));
  indexing.samples = indexing.prepared->source().size();
  return indexing;
}

Result<SizeIndex> SizeIndexing::Build(int threads, int64_t begin, int64_t end,
                                      int64_t header_bytes) const {
  HR_ASSIGN_OR_RETURN(std::vector<std::optional<SampleSize>> sizes,
                      SizeEverySample(prepared->inputs(), prepared->spec().batch.pack.field,
                                      threads, begin, end, header_bytes));
  return SizeIndex::Of(fingerprint, sizes);
}

}  // namespace headrace
