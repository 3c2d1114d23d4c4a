// headrace: the command line. See README.md for the commands.
#include <cstdio>
#include <string>

#include "commands.h"

namespace {

constexpr const char* kUsage = R"(usage: headrace COMMAND [ARGS]

commands:
  make-sample --out DIR [--samples N] [--seed S] [--threads T] [--size WxH]
              [--shards [--shard-size BYTES]]
              [--modalities video,audio,ocr,pointcloud|all] [--mix vqa|vlm]
      generate a chat-VQA sample dataset: JPEG images, manifest.jsonl, tokenizer.model;
      --shards: also as WebDataset tar shards with indexes in DIR/shards;
      --modalities: also per sample an H.264 clip, a WAV tone (and spoken words when
      espeak-ng is on PATH), an OCR page, a LiDAR-like scene (.bin and .pcd);
      --mix vlm: VLM SFT records instead of one image each: 1-20 question/answer pairs,
      0-4 images of 200-2000 px a side ("images": [...], one <image> each, in order),
      some with an H.264 clip ("video", <video>); not with --modalities or --size
  run CONFIG [--report PATH] [--trace PATH] [--set key=value ...] [--start-batch K]
             [--digests] [--max-batches N] [--print-config] [--quiet]
             [--metrics-port [HOST:]PORT] [--progress SECONDS]
      run a pipeline against a simulated trainer (trainer.step_ms per batch) and report;
      --metrics-port: a Prometheus endpoint at /metrics while it runs (PORT: on
      127.0.0.1; 0.0.0.0:PORT for every interface); progress: a live
      line on a terminal, else a line every --progress seconds (30; 0: none)
  report REPORT.json --plot OUT.svg|OUT.html
      a picture of a run report: stage utilization and the trainer's wait over time
  bench ops CONFIG [--samples N] [--report PATH] [--set key=value ...]
      single-thread cost of each operator, ms per sample
  bench engine CONFIG [--samples N] [--report PATH] [--set key=value ...] [--seconds S]
      engine overhead against the operators' cost (rate after planning, runs of at least S
      seconds at the ideal rate, default 2; and CPU per sample), and the fed-trainer
      wait-time ratio
  index sizes CONFIG [--out PATH] [--set key=value ...]
      every sample's sizes by the chain's size pass (nothing decoded), for
      batch.balance.index: a balanced run then deals its steps without sizing a sample
  which CONFIG --step N --rank R | --sample ID [--epoch E] [--world-size W] [--json]
              [--set key=value ...]
      from the plan alone (nothing decoded): the samples of rank R's batch of data-parallel
      step N (index, id, media), or where sample ID lands (step, rank, position); with
      batch.balance as the deal gives them; with batch.pack the input batch's samples
  bench balance CONFIG [--ranks 8,64,256] [--epochs 4] [--cost NAME] [--report PATH]
      each data-parallel step's slowest rank over the mean, as the order deals the steps
      and as batch.balance deals them, from the samples' sizes (nothing decoded)
  bench io [--latency-ms 20] [--inflight 1,8,32,128] [--report bench/io.json]
           [--config CONFIG --samples N]
      object-storage reads against a local server with injected latency; end to end
  upload DIR s3://bucket/prefix [--create-bucket] [--endpoint URL] [--region R]
         [--profile P] [--anonymous] [--addressing-style auto|path|virtual]
      put every file under DIR into the bucket (e.g. the sample dataset)
  ls s3://bucket/prefix-or-glob [--page-size N] [--endpoint URL] ...
      list objects (ListObjectsV2, paginated)
  shard MANIFEST --out DIR [--target-size 256MB] [--media image,video,views:4]
      pack a manifest's samples into WebDataset tar shards with .idx.json indexes;
      --media: the manifest keys whose files become members (KEY:N for a list)
  materialize CONFIG --to DIR|s3://bucket/prefix [--set key=value ...] [--epochs LIST|all]
              [--shard-size BYTES] [--quiet]
      run a pipeline once and write its preprocessed samples as tar shards (one .npy
      member per field) with materialized.json and the config; `source: {materialized:
      URI}` reads them back. Random ops need --epochs (one copy per epoch, epoch-K/)
  doctor CONFIG [--seconds S] [--set key=value ...] [--json] [--report PATH]
         [--storage-mb-s X]   |   doctor --from-report PATH [--json]
      run the pipeline for at most S seconds (20) against the simulated trainer, or read a
      saved report, and say which stage limits the trainer, why, and what to change
  plan [PLAN.yaml] [--preset sources-example] [--from-report PATH] [--instance NAME]
       [--json] [--NAME VALUE ...]   (`headrace plan --help` lists the inputs)
      capacity: vCPUs and CPU-only nodes per GPU node for a target wait-time ratio, GPU
      utilization on the GPU nodes' own vCPUs, I/O hours of materializing vs streaming
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  headrace::tools::Args args(argv + 2, argv + argc);
  if (command == "run") return headrace::tools::RunCommand(args);
  if (command == "make-sample") return headrace::tools::MakeSampleCommand(args);
  if (command == "bench") return headrace::tools::BenchCommand(args);
  if (command == "upload") return headrace::tools::UploadCommand(args);
  if (command == "ls") return headrace::tools::ListCommand(args);
  if (command == "shard") return headrace::tools::ShardCommand(args);
  if (command == "plan") return headrace::tools::PlanCommand(args);
  if (command == "index") return headrace::tools::IndexCommand(args);
  if (command == "report") return headrace::tools::ReportCommand(args);
  if (command == "materialize") return headrace::tools::MaterializeCommand(args);
  if (command == "doctor") return headrace::tools::DoctorCommand(args);
  if (command == "which") return headrace::tools::WhichCommand(args);
  std::fprintf(stderr,
               "headrace: unknown command '%s' (allowed: make-sample, run, bench, upload, ls, "
               "shard, plan, report, materialize, doctor, index, which)\n%s",
               command.c_str(), kUsage);
  return 2;
}
