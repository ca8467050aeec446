"""Arrow IPC fixtures for tests/test_arrow.c and the prepare tests.

  python3 arrow_ref.py fixtures OUT_DIR CONVERSATIONS_JSON   (needs pyarrow)
  python3 arrow_ref.py malformed FIXTURE_DIR OUT_DIR         (standard library only)

`fixtures` writes, with pyarrow, into OUT_DIR:
  all_{stream,file}_{none,lz4,zstd}.arrow  one table of every column shape the
      reader supports, in 3 record batches, with nulls; all_types.json holds the
      expected values (JSON null for a null cell) and the batch row counts.
  empty_stream.arrow                    a schema and no batches.
  dataset/                              a Hugging Face `datasets` folder of 2 shards
      (datasets.save_to_disk when the package is there, else state.json and
      dataset_info.json written by hand in the same layout); dataset.json holds
      its expected values.
  labels.arrow                          input_ids + labels (-100 = masked).
  prompt_response.arrow                 prompt / response strings.
  messages_{stream_lz4,file_zstd}.arrow and messages.jsonl: `messages`
      list<struct<role, content>> from conversations chosen from
      CONVERSATIONS_JSON (indices in prepare_chat.json).
  sharegpt.arrow and sharegpt.jsonl:   the same as ShareGPT `conversations`
      list<struct<from, value>> (human / gpt / system).

`malformed` derives corrupt files from all_stream_none.arrow and
all_file_zstd.arrow: truncated, wrong magic, offsets past the end, bad
flatbuffer offsets, a bad compressed body.
"""
import json
import os
import struct
import sys

ROWS = 8
BATCH = 3


def columns():
    return {
        "id": ("int64", list(range(100, 100 + ROWS))),
        "ids_i32": ("list<int32>", [[1, 2, 3], [], None, [7, None, 9], [-5], [2147483647, -2147483648], [0], [4, 4, 4, 4]]),
        "ids_i64": ("large_list<int64>", [[10], [20, 21], [30, 31, 32], None, [], [9007199254740991], [-1], [5, 6]]),
        "ids_u32": ("list<uint32>", [[4000000000], [1, 2], None, [], [3], [4294967295, 0], [7], [8]]),
        "mask_i8": ("list<int8>", [[0, 1, 1], [], None, [1, 0, 1], [0], [1, 1], [0], [1, 0, 1, 0]]),
        "labels": ("list<int64>", [[-100, 2, 3], [], None, [-100, -100, 9], [-5], [1, -100], [0], [-100, 4, 4, 4]]),
        "text": ("string", ["hello", "", None, "héllo wörld 你好 🌍", "line\nbreak", "tab\tand \"quote\"", "x" * 40, None]),
        "text_large": ("large_string", ["a", None, "bb", "", "ccc", "Ελληνικά", "dd", "e"]),
        "messages": ("list<struct<role: string, content: string>>", [
            [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
            [],
            None,
            [{"role": "system", "content": "sys"}, {"role": "user", "content": None}, None],
            [{"role": "user", "content": "Ünïcödé"}],
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}],
            [{"role": None, "content": ""}],
            [{"role": "assistant", "content": "only"}],
        ]),
        "conversations": ("large_list<struct<from: large_string, value: string>>", [
            [{"from": "human", "value": "Hey"}, {"from": "gpt", "value": "Yo"}],
            None,
            [{"from": "system", "value": "s"}, {"from": "human", "value": "h"}, {"from": "gpt", "value": "g"}],
            [],
            [{"from": "human", "value": None}],
            [{"from": "gpt", "value": "🎉"}],
            None,
            [{"from": "human", "value": "x"}, {"from": "gpt", "value": "y"}],
        ]),
    }


def pa_type(pa, spec):
    spec = spec.strip()
    simple = {"int8": pa.int8(), "int32": pa.int32(), "int64": pa.int64(), "uint32": pa.uint32(),
              "string": pa.string(), "large_string": pa.large_string()}
    if spec in simple:
        return simple[spec]
    for prefix, make in (("large_list<", pa.large_list), ("list<", pa.list_)):
        if spec.startswith(prefix):
            return make(pa_type(pa, spec[len(prefix):-1]))
    assert spec.startswith("struct<")
    fields, depth, cur = [], 0, ""
    for ch in spec[len("struct<"):-1] + ",":
        if ch == "," and depth == 0:
            name, t = cur.split(":", 1)
            fields.append(pa.field(name.strip(), pa_type(pa, t)))
            cur = ""
            continue
        depth += ch == "<"
        depth -= ch == ">"
        cur += ch
    return pa.struct(fields)


def write_table(pa, path, table, fmt, compression, batch_rows):
    opts = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.OSFile(path, "wb") as sink:
        open_writer = pa.ipc.new_stream if fmt == "stream" else pa.ipc.new_file
        with open_writer(sink, table.schema, options=opts) as w:
            for b in table.to_batches(max_chunksize=batch_rows):
                w.write_batch(b)


def make_fixtures(out, conv_path):
    import pyarrow as pa
    os.makedirs(out, exist_ok=True)
    cols = columns()
    table = pa.table({k: pa.array(v, type=pa_type(pa, t)) for k, (t, v) in cols.items()})
    for fmt in ("stream", "file"):
        for comp in (None, "lz4", "zstd"):
            write_table(pa, f"{out}/all_{fmt}_{comp or 'none'}.arrow", table, fmt, comp, BATCH)
    batches = [len(b) for b in table.to_batches(max_chunksize=BATCH)]
    json.dump({"rows": ROWS, "batches": batches, "columns": {k: {"type": t, "values": v} for k, (t, v) in cols.items()}},
              open(f"{out}/all_types.json", "w", encoding="utf-8"), ensure_ascii=False, indent=0)
    write_table(pa, f"{out}/empty_stream.arrow", table.slice(0, 0), "stream", None, BATCH)

    # a datasets folder: pre-tokenized input_ids + loss_mask, 2 shards
    ds = {"input_ids": [[1, 2, 3, 4], [5, 6], [7, 8, 9], [10, 11, 12, 13, 14], [15]],
          "loss_mask": [[0, 0, 1, 1], [0, 1], [1, 1, 1], [0, 0, 0, 1, 1], [1]]}
    ds_dir = f"{out}/dataset"
    try:
        import datasets
        features = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("int32")),
                                      "loss_mask": datasets.Sequence(datasets.Value("int8"))})
        datasets.Dataset.from_dict(ds, features=features).save_to_disk(ds_dir, num_shards=2)
        made_by = "datasets " + datasets.__version__
    except ImportError:
        os.makedirs(ds_dir, exist_ok=True)
        t = pa.table({"input_ids": pa.array(ds["input_ids"], pa.list_(pa.int32())),
                      "loss_mask": pa.array(ds["loss_mask"], pa.list_(pa.int8()))})
        shards = [t.slice(0, 3), t.slice(3)]
        names = [f"data-{i:05d}-of-{len(shards):05d}.arrow" for i in range(len(shards))]
        for name, shard in zip(names, shards):
            write_table(pa, f"{ds_dir}/{name}", shard, "stream", None, 1000)
        json.dump({"_data_files": [{"filename": n} for n in names], "_fingerprint": "0123456789abcdef",
                   "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
                   "_output_all_columns": False, "_split": None}, open(f"{ds_dir}/state.json", "w"), indent=2)
        json.dump({"citation": "", "description": "", "features": {
            "input_ids": {"feature": {"dtype": "int32", "_type": "Value"}, "_type": "Sequence"},
            "loss_mask": {"feature": {"dtype": "int8", "_type": "Value"}, "_type": "Sequence"}},
            "homepage": "", "license": ""}, open(f"{ds_dir}/dataset_info.json", "w"), indent=2)
        made_by = "pyarrow " + pa.__version__ + " (hand-written state.json)"
    json.dump({"made_by": made_by, "columns": ds}, open(f"{out}/dataset.json", "w"), indent=0)

    labels_ids = [[1, 2, 3, 4, 5], [6, 7, 8], [9, 10]]
    labels = [[-100, -100, 3, 4, 5], [-100, 7, -100], [-100, -100]]  # the last row has no loss tokens
    t = pa.table({"input_ids": pa.array(labels_ids, pa.large_list(pa.int64())), "labels": pa.array(labels, pa.list_(pa.int64()))})
    write_table(pa, f"{out}/labels.arrow", t, "stream", "zstd", 2)
    t = pa.table({"prompt": pa.array(["def add(a, b):\n", "# comment\n", None, "x = 1\n"], pa.string()),
                  "response": pa.array(["    return a + b\n", "pass\n", "orphan", "y = 2\n"], pa.large_string())})
    write_table(pa, f"{out}/prompt_response.arrow", t, "file", "lz4", 3)

    conversations = json.load(open(conv_path, encoding="utf-8"))["conversations"]
    chosen = [0, 1, 2, 3, 4, 5, 6, 10, 11, 15, 16, 19, 21]
    convs = [conversations[i] for i in chosen]
    msg_type = pa.list_(pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())]))
    t = pa.table({"messages": pa.array(convs, msg_type)})
    write_table(pa, f"{out}/messages_stream_lz4.arrow", t, "stream", "lz4", 5)
    write_table(pa, f"{out}/messages_file_zstd.arrow", t, "file", "zstd", 4)
    with open(f"{out}/messages.jsonl", "w", encoding="utf-8") as f:
        for c in convs:
            f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
    role_to_from = {"user": "human", "assistant": "gpt", "system": "system"}
    share = [[{"from": role_to_from[m["role"]], "value": m["content"]} for m in c] for c in convs]
    share_type = pa.list_(pa.struct([pa.field("from", pa.string()), pa.field("value", pa.string())]))
    write_table(pa, f"{out}/sharegpt.arrow", pa.table({"conversations": pa.array(share, share_type)}), "stream", None, 6)
    with open(f"{out}/sharegpt.jsonl", "w", encoding="utf-8") as f:
        for c in share:
            f.write(json.dumps({"conversations": c}, ensure_ascii=False) + "\n")
    json.dump({"indices": chosen}, open(f"{out}/prepare_chat.json", "w"))
    print("pyarrow", pa.__version__, "made_by", made_by)


def make_malformed(fixtures, out):
    os.makedirs(out, exist_ok=True)
    stream = open(f"{fixtures}/all_stream_none.arrow", "rb").read()
    filefmt = open(f"{fixtures}/all_file_zstd.arrow", "rb").read()

    def put(name, data):
        open(f"{out}/{name}", "wb").write(data)

    put("empty.arrow", b"")
    put("truncated_header.arrow", stream[:6])
    put("truncated_schema.arrow", stream[:40])
    put("truncated_body.arrow", stream[:len(stream) * 2 // 3])
    put("bad_file_magic.arrow", b"ARROX1\0\0" + filefmt[8:])
    put("bad_file_footer_magic.arrow", filefmt[:-6] + b"ARROX1")
    put("file_truncated.arrow", filefmt[:len(filefmt) - 30])
    # the footer length points before the start of the file
    put("file_footer_length.arrow", filefmt[:-10] + struct.pack("<i", 0x7fffff00) + filefmt[-6:])
    # a stream message whose metadata length runs past the end of the file
    put("metadata_length.arrow", stream[:4] + struct.pack("<i", 0x7ffffff0) + stream[8:])
    # the root table offset of the schema flatbuffer points past its buffer
    put("bad_root_offset.arrow", stream[:8] + struct.pack("<I", 0xfffffff0) + stream[12:])
    # the root table's vtable offset points outside the buffer
    root = struct.unpack_from("<I", stream, 8)[0]
    put("bad_vtable.arrow", stream[:8 + root] + struct.pack("<i", 0x40000000) + stream[12 + root:])
    # overwrite every 4-byte word of the first record batch message's metadata with a huge value, one file each
    # would be many files; instead corrupt the body length (last 8 bytes of the RecordBatch message table region)
    meta_len = struct.unpack_from("<i", stream, 4)[0]
    second = 8 + meta_len
    assert stream[second:second + 4] == b"\xff\xff\xff\xff"
    m2 = struct.unpack_from("<i", stream, second + 4)[0]
    body = bytearray(stream)
    # scan the batch metadata for the 8-byte little-endian body length and make it huge
    meta = stream[second + 8:second + 8 + m2]
    body_len_candidates = [i for i in range(0, len(meta) - 7, 4)
                           if struct.unpack_from("<q", meta, i)[0] > 0 and struct.unpack_from("<q", meta, i)[0] % 8 == 0
                           and second + 8 + m2 + struct.unpack_from("<q", meta, i)[0] <= len(stream)]
    big = bytearray(stream)
    for i in body_len_candidates:  # every 8-aligned positive length: buffer lengths and the body length
        struct.pack_into("<q", big, second + 8 + i, 1 << 40)
    put("buffer_lengths.arrow", bytes(big))
    # a compressed buffer whose content is garbage
    z = bytearray(filefmt)
    pos = filefmt.find(b"\x28\xb5\x2f\xfd")  # zstd frame magic
    assert pos > 0
    z[pos + 4:pos + 16] = b"\xee" * 12
    put("bad_zstd.arrow", bytes(z))
    put("not_arrow.arrow", b'{"this": "is json"}\n' * 4)
    print("wrote", len(os.listdir(out)), "malformed files")


if __name__ == "__main__":
    if sys.argv[1] == "fixtures":
        make_fixtures(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "malformed":
        make_malformed(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
