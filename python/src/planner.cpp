// The overlap planner (gc::model::plan_layer, pipeline_seconds) on Python dicts: how to
// chunk a tensor-parallel layer's exchange and whether to compress it.

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <string>
#include <vector>

#include "arrays.hpp"

namespace gradcomp_py {

namespace gm = gc::model;

nb::dict wire_path_dict(const gm::wire_path& w) {
  nb::dict d;
  d["wire_bytes_per_element"] = w.wire_bytes_per_element;
  d["frame_bytes"] = w.frame_bytes;
  d["encode_elements_per_s"] = w.encode_elements_per_s;
  d["decode_elements_per_s"] = w.decode_elements_per_s;
  d["call_s"] = w.call_s;
  d["collective"] = w.coll == gm::collective::all_gather ? "all_gather" : "all_reduce";
  return d;
}

namespace {

double number(const nb::handle& v, const char* key) {
  if (!nb::isinstance<nb::float_>(v) && !nb::isinstance<nb::int_>(v))
    throw nb::type_error((std::string(key) + ": a number expected").c_str());
  const double x = nb::cast<double>(v);
  if (std::isnan(x) || x < 0) throw nb::value_error((std::string(key) + ": must be >= 0").c_str());
  return x;
}

// A wire_path from a dict with any of wire_path_dict's keys (the others keep their defaults:
// bf16 all-reduced without codec cost).
gm::wire_path wire_path_of(const nb::handle& h, const char* what) {
  gm::wire_path w;
  if (h.is_none()) return w;
  if (!nb::isinstance<nb::dict>(h)) throw nb::type_error((std::string(what) + ": a dict expected").c_str());
  for (auto [k, v] : nb::borrow<nb::dict>(h)) {
    const std::string key = nb::cast<std::string>(k);
    if (key == "wire_bytes_per_element") w.wire_bytes_per_element = number(v, "wire_bytes_per_element");
    else if (key == "frame_bytes") w.frame_bytes = number(v, "frame_bytes");
    else if (key == "encode_elements_per_s") w.encode_elements_per_s = number(v, "encode_elements_per_s");
    else if (key == "decode_elements_per_s") w.decode_elements_per_s = number(v, "decode_elements_per_s");
    else if (key == "call_s") w.call_s = number(v, "call_s");
    else if (key == "collective") {
      const std::string c = nb::cast<std::string>(v);
      if (c == "all_gather") w.coll = gm::collective::all_gather;
      else if (c == "all_reduce") w.coll = gm::collective::all_reduce;
      else throw nb::value_error("collective: 'all_gather' or 'all_reduce'");
    } else {
      throw nb::value_error((std::string(what) + ": unknown key '" + key + "'").c_str());
    }
  }
  if (!(w.encode_elements_per_s > 0) || !(w.decode_elements_per_s > 0))
    throw nb::value_error((std::string(what) + ": throughputs must be > 0").c_str());
  return w;
}

struct problem_and_options {
  gm::layer_problem p;
  gm::planner_options o;
};

problem_and_options read(std::size_t elements, std::size_t granule, double compute_s, std::size_t ranks,
                         double latency_s, double bytes_per_s, nb::handle plain, nb::handle compressed,
                         double chunk_overhead_s, std::size_t max_chunks, bool codec_shares_compute) {
  if (elements == 0) throw nb::value_error("elements: must be > 0");
  if (granule == 0) throw nb::value_error("granule: must be > 0");
  if (ranks < 2) throw nb::value_error("ranks: at least 2");
  if (max_chunks == 0) throw nb::value_error("max_chunks: at least 1");
  if (!(bytes_per_s > 0)) throw nb::value_error("bytes_per_s: must be > 0");
  if (!(latency_s >= 0) || !(compute_s >= 0) || !(chunk_overhead_s >= 0))
    throw nb::value_error("latency_s, compute_s, chunk_overhead_s: must be >= 0");
  problem_and_options r;
  r.p = {elements, granule, compute_s, chunk_overhead_s, ranks};
  r.o.net = {latency_s, bytes_per_s};
  r.o.plain = wire_path_of(plain, "plain");
  r.o.compressed = wire_path_of(compressed, "compressed");
  r.o.max_chunks = max_chunks;
  r.o.codec_shares_compute = codec_shares_compute;
  return r;
}

}  // namespace

void bind_planner(nb::module_& m) {
  m.def("plan_layer", [](std::size_t elements, std::size_t granule, double compute_s, std::size_t ranks, double latency_s,
                         double bytes_per_s, nb::handle plain, nb::handle compressed, double chunk_overhead_s,
                         std::size_t max_chunks, bool codec_shares_compute) {
    const auto in = read(elements, granule, compute_s, ranks, latency_s, bytes_per_s, plain, compressed, chunk_overhead_s,
                         max_chunks, codec_shares_compute);
    gm::plan r;
    {
      nb::gil_scoped_release unlocked;
      r = gm::plan_layer(in.p, in.o);
    }
    nb::dict d;
    d["compress"] = r.compress;
    d["sizes"] = r.sizes;
    d["seconds"] = r.seconds;
    d["plain_seconds"] = r.plain_seconds;
    d["compressed_seconds"] = r.compressed_seconds;
    return d;
  }, nb::arg("elements"), nb::arg("granule"), nb::arg("compute_s"), nb::arg("ranks"), nb::arg("latency_s"),
     nb::arg("bytes_per_s"), nb::arg("plain") = nb::none(), nb::arg("compressed") = nb::none(),
     nb::arg("chunk_overhead_s") = 0.0, nb::arg("max_chunks") = 32, nb::arg("codec_shares_compute") = false,
     nb::sig("def plan_layer(elements: int, granule: int, compute_s: float, ranks: int, latency_s: float, "
             "bytes_per_s: float, plain: dict | None = None, compressed: dict | None = None, "
             "chunk_overhead_s: float = 0.0, max_chunks: int = 32, codec_shares_compute: bool = False) -> dict"),
     "AccTFM's partition search: how to chunk one layer's exchange, and whether to compress it.\n\n"
     "Chunks pass compute, encode, network and decode in order, each stage a resource serving chunks\n"
     "in order; the plan minimises the last chunk's finish (docs/model.md gives the model).\n\n"
     "Args:\n"
     "    elements (int): elements the layer exchanges (tokens x hidden).\n"
     "    granule (int): chunk sizes are multiples of it (a token row: hidden).\n"
     "    compute_s (float): the compute producing them, all chunks together (seconds).\n"
     "    ranks (int): tensor-parallel group size (>= 2).\n"
     "    latency_s, bytes_per_s (float): the link (alpha, beta).\n"
     "    plain (dict, optional): the uncompressed path (keys as :meth:`Compressor.measure_path`\n"
     "        returns; default bf16 all-reduced, no codec cost).\n"
     "    compressed (dict, optional): the codec's path, e.g. ``Compressor.measure_path(sample)``.\n"
     "    chunk_overhead_s (float): fixed compute cost per chunk.\n"
     "    max_chunks (int): the most chunks.\n"
     "    codec_shares_compute (bool): encode runs on the compute resource.\n\n"
     "Returns:\n"
     "    dict: ``compress`` (bool), ``sizes`` (elements per chunk), ``seconds`` (the plan's predicted\n"
     "    time), ``plain_seconds`` and ``compressed_seconds`` (the best plan of each path).");

  m.def("best_chunking", [](std::size_t elements, std::size_t granule, double compute_s, std::size_t ranks,
                            double latency_s, double bytes_per_s, nb::handle path, double chunk_overhead_s,
                            std::size_t max_chunks) {
    const auto in = read(elements, granule, compute_s, ranks, latency_s, bytes_per_s, nb::none(), path, chunk_overhead_s,
                         max_chunks, false);
    std::pair<double, std::vector<std::size_t>> r;
    {
      nb::gil_scoped_release unlocked;
      r = gm::best_chunking(in.p, in.o, in.o.compressed);
    }
    nb::dict d;
    d["seconds"] = r.first;
    d["sizes"] = r.second;
    return d;
  }, nb::arg("elements"), nb::arg("granule"), nb::arg("compute_s"), nb::arg("ranks"), nb::arg("latency_s"),
     nb::arg("bytes_per_s"), nb::arg("path") = nb::none(), nb::arg("chunk_overhead_s") = 0.0, nb::arg("max_chunks") = 32,
     nb::sig("def best_chunking(elements: int, granule: int, compute_s: float, ranks: int, latency_s: float, "
             "bytes_per_s: float, path: dict | None = None, chunk_overhead_s: float = 0.0, max_chunks: int = 32) -> dict"),
     "The best chunking of one layer's exchange on one given path (see :func:`plan_layer`).\n\n"
     "Args:\n"
     "    path (dict, optional): the path (default bf16 all-reduced); the other arguments as for\n"
     "        :func:`plan_layer`.\n\n"
     "Returns:\n"
     "    dict: ``seconds`` (predicted) and ``sizes`` (elements per chunk).");

  m.def("pipeline_seconds", [](std::vector<std::size_t> sizes, std::size_t granule, double compute_s, std::size_t ranks,
                               double latency_s, double bytes_per_s, nb::handle path, double chunk_overhead_s) {
    std::size_t elements = 0;
    for (const std::size_t s : sizes) elements += s;
    const auto in = read(elements, granule, compute_s, ranks, latency_s, bytes_per_s, nb::none(), path, chunk_overhead_s,
                         1, false);
    return gm::pipeline_seconds(in.p, in.o, in.o.compressed, sizes);
  }, nb::arg("sizes"), nb::arg("granule"), nb::arg("compute_s"), nb::arg("ranks"), nb::arg("latency_s"),
     nb::arg("bytes_per_s"), nb::arg("path") = nb::none(), nb::arg("chunk_overhead_s") = 0.0,
     nb::sig("def pipeline_seconds(sizes: list[int], granule: int, compute_s: float, ranks: int, latency_s: float, "
             "bytes_per_s: float, path: dict | None = None, chunk_overhead_s: float = 0.0) -> float"),
     "The planner's predicted time of given chunk sizes on one path (see :func:`plan_layer`).\n\n"
     "Args:\n"
     "    sizes (list[int]): elements per chunk, in order (one chunk: no pipeline).\n"
     "    path (dict, optional): the path (default bf16 all-reduced); the other arguments as for\n"
     "        :func:`plan_layer`.\n\n"
     "Returns:\n"
     "    float: seconds.");
}

}  // namespace gradcomp_py
