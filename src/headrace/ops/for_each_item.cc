#include "headrace/ops/for_each_item.h"

#include <algorithm>
#include <cstring>

namespace headrace {

ForEachItemOp::ForEachItemOp(Options options, std::vector<std::unique_ptr<Op>> ops)
    : options_(std::move(options)), ops_(std::move(ops)) {
  name_ = options_.list + "[*]:";
  for (size_t i = 0; i < ops_.size(); ++i) {
    name_ += (i == 0 ? " " : ", ") + std::string(ops_[i]->name());
  }
  for (const ItemField& f : options_.fields) num_rows_ = std::max(num_rows_, f.row + 1);
  num_rows_ = std::max(num_rows_, options_.count_row + 1);
}

bool ForEachItemOp::Predict(SizePass& pass) const {
  // Each item's bytes in the list's slot, as Run puts them there.
  SampleContext item = *pass.ctx;
  SizePass each = pass;
  each.ctx = &item;
  bool known = true;
  int64_t count = 0;
  pass.ctx->sample->ForEachMedia(options_.source_field, [&](const Buffer& bytes,
                                                             std::string_view) {
    if (!known) return;
    item.Set(options_.slot, EncodedBytes{bytes.data(), bytes.size()});
    for (const auto& op : ops_) {
      if (!op->Predict(each)) {
        known = false;  // what the items before told stays: a lower bound
        return;
      }
    }
    ++count;
  });
  for (const ItemField& f : options_.fields) {
    if (!f.padded) pass.rows[static_cast<size_t>(f.row)] += count;
  }
  // The item's values die with it, as in Run.
  item.Set(options_.slot, Value());
  pass.images[static_cast<size_t>(options_.slot)] = {};
  return known;
}

Status ForEachItemOp::Run(SampleContext& ctx) const {
  // The item's view of the sample: its rows, randomness and scratch. Per thread, reused.
  thread_local std::vector<uint8_t*> item_rows;
  item_rows.assign(ctx.rows, ctx.rows + num_rows_);
  SampleContext item = ctx;
  item.rows = item_rows.data();
  item.scratch = &ctx.scratch->Nested();
  item.next_scratch = 0;

  Status status;
  int count = 0;
  ctx.sample->ForEachMedia(options_.source_field, [&](const Buffer& bytes,
                                                      std::string_view uri) {
    if (!status.ok()) return;
    if (count == options_.max_items) {  // the source caps lists; a bug if it did not
      status = Status::Internal(options_.list + ": more than max_items " +
                                std::to_string(options_.max_items) + " items");
      return;
    }
    for (const ItemField& f : options_.fields) {
      if (f.padded) {
        item_rows[static_cast<size_t>(f.row)] =
            ctx.rows[f.row] + static_cast<size_t>(count) * f.item_bytes;
        continue;
      }
      Result<uint8_t*> row = ctx.AppendRows(f.row, 1);
      if (!row.ok()) {
        status = row.status();
        return;
      }
      item_rows[static_cast<size_t>(f.row)] = *row;
    }
    item.sample_seed = HashKeys(ctx.sample_seed, static_cast<uint64_t>(count));
    item.Set(options_.slot, EncodedBytes{bytes.data(), bytes.size()});
    for (const auto& op : ops_) {
      item.frames_decoded = -1;
      item.frames_taken = 0;
      status = op->Run(item);
      if (item.frames_decoded >= 0) {  // each item's video frames count for the list op
        ctx.frames_decoded = std::max<int64_t>(ctx.frames_decoded, 0) + item.frames_decoded;
        ctx.frames_taken += item.frames_taken;
      }
      if (!status.ok()) {
        status = status.WithContext(options_.list + "[" + std::to_string(count) + "] " +
                                     std::string(uri));
        break;
      }
    }
    ++count;
  });
  // The item's values die with it: no op after this one may read them.
  item.Set(options_.slot, Value());
  if (!status.ok()) return status;
  for (const ItemField& f : options_.fields) {
    if (!f.padded) continue;
    const size_t used = static_cast<size_t>(count) * f.item_bytes;
    std::memset(ctx.rows[f.row] + used, 0,
                static_cast<size_t>(options_.max_items) * f.item_bytes - used);
  }
  if (options_.count_row >= 0) {
    const int64_t n = count;
    std::memcpy(ctx.rows[options_.count_row], &n, sizeof n);
  }
  return Status::Ok();
}

}  // namespace headrace
