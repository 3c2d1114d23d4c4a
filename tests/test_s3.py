"""Object storage through a real S3 implementation: moto in server mode on 127.0.0.1,
with signature checks on. `headrace upload` puts the sample dataset into a bucket,
`headrace ls` lists it page by page, and pipelines read it over the real protocol."""
import json
import re

import pytest

from e2e_util import REPO, read_report, run_headrace, write_config

import subprocess

BUCKET = "headrace-data"
PREFIX = "datasets/sample"


def headrace(binary, *args, env, check=True, timeout=120):
    proc = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"headrace {' '.join(map(str, args))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def uploaded(moto_s3, sample_dir, headrace_bin, tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    env = moto_s3.env(home)
    proc = headrace(headrace_bin, "upload", sample_dir, f"s3://{BUCKET}/{PREFIX}/",
                    "--create-bucket", env=env)
    assert "uploaded" in proc.stdout
    return env


def s3_config(tmp_path, sample_dir, extra=""):
    config = write_config(tmp_path / "p.yaml", sample_dir, extra=extra)
    text = config.read_text().replace(str(sample_dir / "manifest.jsonl"),
                                      f"s3://{BUCKET}/{PREFIX}/manifest.jsonl")
    config.write_text(text)
    return config


def local_report(headrace_bin, tmp_path, sample_dir):
    config = write_config(tmp_path / "local.yaml", sample_dir)
    report = tmp_path / "local.json"
    run_headrace(headrace_bin, "run", config, "--report", report, "--digests", "--quiet")
    return read_report(report)


def local_digests(headrace_bin, tmp_path, sample_dir):
    return local_report(headrace_bin, tmp_path, sample_dir)["batch_digests"]


def test_upload_puts_every_file_and_ls_pages_through_them(uploaded, moto_s3, headrace_bin,
                                                          sample_dir):
    files = sorted(p.relative_to(sample_dir).as_posix() for p in sample_dir.rglob("*") if p.is_file())
    # What boto3 reads back is what was on disk.
    client = moto_s3.client()
    for name in ("manifest.jsonl", "images/000017.jpg"):
        body = client.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{name}")["Body"].read()
        assert body == (sample_dir / name).read_bytes()

    with moto_s3.auth_off():
        proc = headrace(headrace_bin, "ls", f"s3://{BUCKET}/{PREFIX}/", "--page-size", 7,
                        env=uploaded)
        globbed = headrace(headrace_bin, "ls", f"s3://{BUCKET}/{PREFIX}/images/*.jpg",
                           env=uploaded)
        none = headrace(headrace_bin, "ls", f"s3://{BUCKET}/{PREFIX}/*.jsonl", env=uploaded)
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith(f"{len(files)} objects")
    listed = sorted(line.split()[1][len(f"s3://{BUCKET}/{PREFIX}/"):] for line in lines[:-1])
    assert listed == files
    sizes = {line.split()[1]: int(line.split()[0]) for line in lines[:-1]}
    assert sizes[f"s3://{BUCKET}/{PREFIX}/manifest.jsonl"] == (sample_dir / "manifest.jsonl").stat().st_size
    # ListObjectsV2 was paginated: one request per page of 7.
    requests = int(lines[-1].split(",")[2].split()[0])
    assert requests == -(-len(files) // 7)

    assert globbed.stdout.strip().splitlines()[-1].startswith("48 objects")
    assert none.stdout.strip().splitlines()[-1].startswith("1 objects")


def test_pipeline_from_s3_yields_the_batches_of_local_disk(uploaded, headrace_bin, tmp_path,
                                                           sample_dir):
    config = s3_config(tmp_path, sample_dir)
    report = tmp_path / "s3.json"
    headrace(headrace_bin, "run", config, "--report", report, "--digests", "--quiet", env=uploaded)
    r = read_report(report)
    assert r["samples"] == 48
    assert r["errors"]["total"] == 0
    assert r["batch_digests"] == local_digests(headrace_bin, tmp_path, sample_dir)


def test_manifest_images_and_tokenizer_model_all_from_s3(uploaded, moto_s3, headrace_bin,
                                                        tmp_path, sample_dir):
    config = s3_config(tmp_path, sample_dir)
    config.write_text(config.read_text().replace(str(sample_dir / "tokenizer.model"),
                                                 f"s3://{BUCKET}/{PREFIX}/tokenizer.model"))
    assert str(sample_dir) not in config.read_text()  # nothing left on local disk
    report = tmp_path / "s3.json"
    headrace(headrace_bin, "run", config, "--report", report, "--digests", "--quiet", env=uploaded)
    r = read_report(report)
    assert r["errors"]["total"] == 0
    local = local_report(headrace_bin, tmp_path, sample_dir)
    assert r["batch_digests"] == local["batch_digests"]
    # Every read went to S3: the manifest, the model and 48 images, no retries.
    assert list(r["storage"]) == ["s3"]
    s3 = r["storage"]["s3"]
    assert s3["endpoint"] == moto_s3.endpoint
    assert s3["requests"] == 50 and s3["retries"] == 0 and s3["errors"] == 0
    files = ["manifest.jsonl", "tokenizer.model"] + [f"images/{i:06d}.jpg" for i in range(48)]
    assert s3["bytes"] == sum((sample_dir / f).stat().st_size for f in files)
    assert moto_s3.secret not in report.read_text()
    assert moto_s3.key_id not in report.read_text()
    # The same run from local disk reports its reads there.
    assert local["storage"] == {"local": {"reads": 50, "bytes": s3["bytes"], "errors": 0}}


def test_missing_tokenizer_model_on_s3_names_the_key_and_uri(uploaded, headrace_bin, tmp_path,
                                                             sample_dir):
    config = s3_config(tmp_path, sample_dir)
    uri = f"s3://{BUCKET}/{PREFIX}/no-such.model"
    config.write_text(config.read_text().replace(str(sample_dir / "tokenizer.model"), uri))
    proc = headrace(headrace_bin, "run", config, env=uploaded, check=False)
    assert proc.returncode == 2
    assert "text.tokenize.model" in proc.stderr and uri in proc.stderr


def test_large_objects_are_read_as_ranged_parts(uploaded, headrace_bin, tmp_path, sample_dir):
    # 64 KiB parts: most sample images take several ranged GETs, fetched in parallel into
    # one buffer; the batches must not change.
    big = [p for p in (sample_dir / "images").iterdir() if p.stat().st_size > 3 * 65536]
    assert big, "the sample has no image over 192 KiB"
    config = s3_config(tmp_path, sample_dir, extra="storage: {part_bytes: 64KiB}")
    report = tmp_path / "s3.json"
    headrace(headrace_bin, "run", config, "--report", report, "--digests", "--quiet", env=uploaded)
    r = read_report(report)
    assert r["errors"]["total"] == 0
    assert r["batch_digests"] == local_digests(headrace_bin, tmp_path, sample_dir)


def test_virtual_hosted_addressing(uploaded, moto_s3, headrace_bin, tmp_path, sample_dir):
    # bucket.localhost resolves to 127.0.0.1 inside libcurl; moto serves the bucket from
    # the Host header.
    port = moto_s3.endpoint.rsplit(":", 1)[1]
    env = dict(uploaded, AWS_ENDPOINT_URL=f"http://localhost:{port}")
    with moto_s3.auth_off():
        proc = headrace(headrace_bin, "ls", f"s3://{BUCKET}/{PREFIX}/manifest.jsonl",
                        "--addressing-style", "virtual", env=env)
    assert proc.stdout.strip().splitlines()[-1].startswith("1 objects")
    config = s3_config(tmp_path, sample_dir, extra="storage: {addressing_style: virtual}")
    report = tmp_path / "v.json"
    headrace(headrace_bin, "run", config, "--report", report, "--quiet", env=env)
    assert read_report(report)["samples"] == 48


def test_credentials_from_the_shared_file_and_profile(uploaded, moto_s3, headrace_bin, tmp_path,
                                                      sample_dir):
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = AKIAWRONGWRONGWRONG0\n"
                     f"aws_secret_access_key = wrong\n\n[train]\n"
                     f"aws_access_key_id = {moto_s3.key_id}\n"
                     f"aws_secret_access_key = {moto_s3.secret}\n")
    env = moto_s3.env(tmp_path, AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None,
                      AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_PROFILE="train")
    config = s3_config(tmp_path, sample_dir)
    report = tmp_path / "p.json"
    headrace(headrace_bin, "run", config, "--report", report, "--quiet", env=env)
    assert read_report(report)["samples"] == 48
    # The profile can also come from the config.
    env.pop("AWS_PROFILE")
    headrace(headrace_bin, "run", config, "--report", report, "--quiet",
             "--set", "storage.profile=train", env=env)
    assert read_report(report)["samples"] == 48


def test_wrong_secret_is_a_clear_error_that_never_prints_the_secret(uploaded, moto_s3,
                                                                    headrace_bin, tmp_path,
                                                                    sample_dir):
    secret = "Wr0ngSecretValueThatMustNeverBePrinted"
    env = dict(uploaded, AWS_SECRET_ACCESS_KEY=secret)
    config = s3_config(tmp_path, sample_dir)
    proc = headrace(headrace_bin, "run", config, "--report", tmp_path / "r.json", env=env,
                    check=False)
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert "access denied" in out
    assert moto_s3.endpoint in out
    assert "environment (AWS_ACCESS_KEY_ID)" in out
    assert "SignatureDoesNotMatch" in out
    assert secret not in out
    assert moto_s3.key_id not in out  # only its first characters


def test_session_token_is_sent_and_never_printed(uploaded, headrace_bin, tmp_path, sample_dir):
    token = "FQoGZXIvYXdzTokenMustNotLeak123"
    env = dict(uploaded, AWS_SESSION_TOKEN=token)
    proc = headrace(headrace_bin, "run", s3_config(tmp_path, sample_dir), env=env, check=False)
    assert proc.returncode == 1
    assert "InvalidToken" in proc.stderr  # moto checked the token we sent
    assert token not in proc.stdout + proc.stderr


def test_unknown_access_key_is_named(uploaded, headrace_bin, tmp_path, sample_dir):
    env = dict(uploaded, AWS_ACCESS_KEY_ID="AKIANOSUCHKEY0000000")
    proc = headrace(headrace_bin, "run", s3_config(tmp_path, sample_dir), env=env, check=False)
    assert proc.returncode == 1
    assert "InvalidAccessKeyId" in proc.stderr


def test_no_credentials_anywhere_says_where_it_looked(uploaded, moto_s3, headrace_bin, tmp_path,
                                                      sample_dir):
    env = moto_s3.env(tmp_path, AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None)
    proc = headrace(headrace_bin, "run", s3_config(tmp_path, sample_dir), env=env, check=False)
    assert proc.returncode == 2
    assert "no AWS credentials found" in proc.stderr
    assert "storage.anonymous" in proc.stderr


def test_anonymous_request_to_a_private_bucket_is_denied(uploaded, headrace_bin, tmp_path,
                                                         sample_dir):
    config = s3_config(tmp_path, sample_dir, extra="storage: {anonymous: true}")
    proc = headrace(headrace_bin, "run", config, env=uploaded, check=False)
    assert proc.returncode == 1
    assert "access denied" in proc.stderr and "anonymous" in proc.stderr


def test_missing_bucket_is_named(uploaded, headrace_bin, tmp_path, sample_dir):
    config = s3_config(tmp_path, sample_dir)
    config.write_text(config.read_text().replace(f"s3://{BUCKET}/", "s3://no-such-bucket/"))
    proc = headrace(headrace_bin, "run", config, env=uploaded, check=False)
    assert proc.returncode == 2  # the configuration points at nothing
    assert "bucket 'no-such-bucket' does not exist" in proc.stderr


def test_missing_manifest_is_not_found(uploaded, headrace_bin, tmp_path, sample_dir):
    config = s3_config(tmp_path, sample_dir)
    config.write_text(config.read_text().replace("manifest.jsonl", "nope.jsonl"))
    proc = headrace(headrace_bin, "run", config, env=uploaded, check=False)
    assert proc.returncode == 2  # the configuration points at nothing
    assert "not_found" in proc.stderr and "nope.jsonl" in proc.stderr


def test_bad_media_lines_are_per_sample_errors(uploaded, moto_s3, headrace_bin, tmp_path,
                                               sample_dir):
    lines = (sample_dir / "manifest.jsonl").read_text().splitlines()
    missing = json.loads(lines[3])
    missing["image"] = "images/missing.jpg"
    escape = json.loads(lines[5])
    escape["image"] = "../../outside/x.jpg"
    lines[3], lines[5] = json.dumps(missing), json.dumps(escape)
    moto_s3.client().put_object(Bucket=BUCKET, Key=f"{PREFIX}/bad.jsonl",
                                Body="\n".join(lines).encode())
    config = s3_config(tmp_path, sample_dir, extra="errors: {max_error_rate: 0.2}")
    config.write_text(config.read_text().replace("manifest.jsonl", "bad.jsonl"))
    report = tmp_path / "r.json"
    headrace(headrace_bin, "run", config, "--report", report, "--quiet", env=uploaded)
    r = read_report(report)
    assert r["samples"] == 46
    assert r["errors"]["by_kind"] == {"not_found": 1, "path_escape": 1}
    text = json.dumps(r["errors"]["first"])
    assert "images/missing.jpg" in text and "leaves the root" in text


def test_storage_keys_are_validated_and_round_trip(headrace_bin, tmp_path, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir,
                          extra="storage: {addressing_style: sideways}")
    proc = run_headrace(headrace_bin, "run", config, check=False)
    assert proc.returncode == 2
    assert "storage.addressing_style" in proc.stderr and "auto, path, virtual" in proc.stderr
    config = write_config(tmp_path / "p.yaml", sample_dir,
                          extra="storage: {endpoint: 'ftp://x', max_retries: 3}")
    proc = run_headrace(headrace_bin, "run", config, check=False)
    assert proc.returncode == 2 and "storage.endpoint" in proc.stderr
    config = write_config(tmp_path / "p.yaml", sample_dir,
                          extra="storage: {endpoint: 'http://127.0.0.1:9', region: eu-west-1, "
                                "part_bytes: 16MiB}")
    printed = run_headrace(headrace_bin, "run", config, "--print-config").stdout
    assert 'endpoint: "http://127.0.0.1:9"' in printed
    assert "part_bytes: 16777216" in printed
    assert "addressing_style: auto" in printed


def vlm_configs(uploaded, headrace_bin, tmp_path, **batch):
    """make-sample's VLM mix (24 samples) on local disk and uploaded, and a Qwen2-VL
    pipeline over each (`batch`: the Pipeline's batch keywords): (data, local config, S3
    config)."""
    import importlib.util
    import headrace as hr
    # tests/python/conftest.py's fetch_vocabs (data/vocabs, fetched once, under its lock).
    spec = importlib.util.spec_from_file_location("python_conftest",
                                                  REPO / "tests/python/conftest.py")
    python_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(python_conftest)
    python_conftest.fetch_vocabs()
    data = tmp_path / "vlm"
    run_headrace(headrace_bin, "make-sample", "--out", data, "--samples", 24, "--seed", 5,
                 "--mix", "vlm")
    headrace(headrace_bin, "upload", data, f"s3://{BUCKET}/datasets/vlm/", env=uploaded)
    ops = hr.ops
    template = (REPO / "tests/python/data/chat_templates/Qwen2-VL-7B-Instruct.jinja").read_text()
    pipe = hr.Pipeline(
        source={"manifest": data / "manifest.jsonl", "root": data,
                "fields": [{"name": "images", "kind": "image", "max_items": 4},
                           {"name": "conversation", "kind": "conversation",
                            "key": "conversations"}]},
        ops=[ops.decode(field="images"),
             ops.smart_resize(preset="qwen2_vl", field="images", max_pixels=200704),
             ops.vision_patchify(preset="qwen2_vl", field="images"),
             ops.tokenize(tokenizer=str(REPO / "data/vocabs/qwen2/tokenizer.json"),
                          chat_template=template, preset="qwen2_vl",
                          grid_field="image_grid_thw", pad=False, max_length=16384)],
        seed=1, epochs=1, cpu_threads=2, memory_budget="512MiB", **batch)
    local = tmp_path / "local.yaml"
    local.write_text(pipe.spec().to_yaml())
    remote = tmp_path / "s3.yaml"
    remote.write_text(local.read_text()
                      .replace(str(data / "manifest.jsonl"),
                               f"s3://{BUCKET}/datasets/vlm/manifest.jsonl")
                      .replace(f'"{data}"', f'"s3://{BUCKET}/datasets/vlm"'))
    return data, local, remote


def test_packing_planned_from_s3_reads_each_object_once_and_packs_as_local_disk(
        uploaded, moto_s3, headrace_bin, tmp_path):
    # A VLM mix packed over S3: the planner sizes each input batch's samples from their
    # bytes read over the protocol before they run, and the samples run on those same
    # bytes (read once); the packed batches are those of local disk.
    data, local, remote = vlm_configs(uploaded, headrace_bin, tmp_path, batch_size=4,
                                      pack={"seq_len": 16384, "window": 4})
    reports = {}
    for name, config in (("local", local), ("s3", remote)):
        out = tmp_path / f"{name}.json"
        headrace(headrace_bin, "run", config, "--report", out, "--digests", "--quiet",
                 env=uploaded, timeout=300)
        reports[name] = read_report(out)
    s3, disk = reports["s3"], reports["local"]
    assert s3["samples"] == disk["samples"] == 24
    assert s3["batch_digests"] == disk["batch_digests"]
    assert s3["pack"]["planned_batches"] == len(s3["batch_digests"]) > 0
    media = sum(len(json.loads(line).get("images", []))
                for line in (data / "manifest.jsonl").read_text().splitlines())
    # Each image read once (the sizer's reads are the samples'), plus the manifest; the
    # tokenizer's files are local either way.
    assert s3["storage"]["s3"]["requests"] == media + 1
    assert s3["storage"]["s3"]["errors"] == 0
    assert disk["storage"]["local"]["reads"] == media + 1 + s3["storage"]["local"]["reads"]


def test_a_size_index_from_s3_reads_the_images_headers_and_is_the_whole_reads_index(
        uploaded, moto_s3, headrace_bin, tmp_path):
    """`headrace index sizes` over S3 (issue 49): each image's first 16 KiB by a ranged
    GET (its header), not the object: the index is byte for byte the one built from
    whole reads (and its sizes those from local disk), for a fraction of the bytes."""
    data, local, remote = vlm_configs(uploaded, headrace_bin, tmp_path, batch_size=4)
    read = {}
    for name, config, extra in (("local", local, ()), ("s3", remote, ()),
                                ("s3-whole", remote, ("--header-bytes", "0"))):
        proc = headrace(headrace_bin, "index", "sizes", config, "--out", tmp_path / name,
                        *extra, env=uploaded, timeout=300)
        assert "24 samples (0 not told" in proc.stdout, proc.stdout
        read[name] = float(re.search(r"([0-9.]+) MB of media read", proc.stdout).group(1))
    def sizes(name):  # the index past its fingerprint (which names the source's location)
        data = (tmp_path / name).read_bytes()
        return data[12 + int.from_bytes(data[8:12], "little"):]

    assert (tmp_path / "s3").read_bytes() == (tmp_path / "s3-whole").read_bytes()
    assert sizes("s3") == sizes("local")
    images = sum(p.stat().st_size for p in data.rglob("*") if p.suffix in (".jpg", ".png", ".webp"))
    assert read["s3-whole"] * 1e6 >= images
    assert read["s3"] < read["s3-whole"] / 2, read


def test_video_read_in_ranges_from_s3_gives_the_frames_of_whole_reads_from_a_fraction(
        uploaded, headrace_bin, tmp_path):
    # video.decode read: ranges over S3: for each clip the MP4 index (at the end of one
    # file, at the start of the other: faststart), then the stretches the frames wanted
    # need. The batches are those of whole reads, byte for byte; the bytes a fraction.
    clips = tmp_path / "clips"
    clips.mkdir()
    lines = []
    for i, flags in enumerate([[], ["-movflags", "+faststart"], []]):
        path = clips / f"v{i}.mp4"
        subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i",
                        f"testsrc2=s=160x90:r=25:d=20,noise=alls=10:allf=t",
                        "-c:v", "libx264", "-g", "25", "-pix_fmt", "yuv420p", *flags,
                        "-y", str(path)], check=True)
        lines.append(json.dumps({"id": f"v{i}", "video": f"v{i}.mp4"}))
    (clips / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    headrace(headrace_bin, "upload", clips, f"s3://{BUCKET}/datasets/clips/", env=uploaded)
    total = sum(p.stat().st_size for p in clips.glob("*.mp4"))

    def run(seek, read):
        config = tmp_path / f"{seek}-{read}.yaml"
        config.write_text(
            f"source:\n  manifest: s3://{BUCKET}/datasets/clips/manifest.jsonl\n"
            "  fields:\n    - {name: video, kind: video, required: true}\n"
            "seed: 3\nepochs: 2\nbatch:\n  size: 3\n"
            "ops:\n  - video.decode: {frames: 6, width: 32, height: 24, clip_seconds: 2, "
            f"seek: {seek}, read: {read}}}\n"
            "execution:\n  cpu_threads: 2\n")
        out = tmp_path / f"{seek}-{read}.json"
        headrace(headrace_bin, "run", config, "--report", out, "--digests", "--quiet",
                 env=uploaded)
        return read_report(out)

    for seek in ("exact", "keyframe"):
        whole, ranged = run(seek, "whole"), run(seek, "ranges")
        assert ranged["samples"] == whole["samples"] == 6
        assert ranged["errors"]["total"] == 0
        assert ranged["batch_digests"] == whole["batch_digests"], seek
        media_bytes = ranged["storage"]["s3"]["bytes"] - (clips / "manifest.jsonl").stat().st_size
        assert whole["storage"]["s3"]["bytes"] >= 2 * total  # two epochs, whole clips
        # A 2 s clip of 20 s: its GOPs, the index and the first 64 KiB of each file.
        assert media_bytes < (2 * total) // 3, (seek, media_bytes, total)
        assert ranged["ranged_reads"]["unplanned"] == 0, ranged["ranged_reads"]
        # The ranges, and each object's size: a one-byte GET per sample.
        assert ranged["ranged_reads"]["bytes"] + ranged["samples"] == media_bytes
