// The table of composite ops (composites.hpp): each row names a function of
// wholestep/nn.hpp or wholestep/tensor.hpp and how its operands and
// attributes arrive by name.
#include "nn/composites.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wholestep/nn.hpp"

namespace ws::nn {
namespace {

using In = std::span<const Tensor>;
using A = const CompositeAttrs&;
using Out = std::vector<Tensor>;

bool is_floating_kind(const ir::AttrValue& v) {
  return std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v);
}

Pool2dOptions pool_options(const CompositeAttrs& a) {
  Pool2dOptions o;
  o.kernel = a.ints("kernel");
  o.stride = a.ints("stride");
  o.padding = a.ints("padding");
  o.ceil_mode = a.flag("ceil_mode");
  if (a.values.contains("dilation")) o.dilation = a.ints("dilation");
  if (a.values.contains("count_include_pad")) o.count_include_pad = a.flag("count_include_pad");
  if (a.values.contains("divisor_override")) o.divisor_override = a.i64("divisor_override");
  return o;
}

// torch's reduction enum: 0 none, 1 mean, 2 sum.
Reduction reduction(const CompositeAttrs& a, std::string_view composite, Loc loc) {
  const int64_t r = a.i64("reduction");
  if (r < 0 || r > 2)
    throw Error(fmt::format("{}: reduction {} is not 0 (none), 1 (mean) or 2 (sum){}", composite, r,
                            at(SourceLoc::from(loc))));
  return r == 0 ? Reduction::none : r == 1 ? Reduction::mean : Reduction::sum;
}

// clang-format off
const Composite kTable[] = {
  {"avg_pool2d", "x",
   "kernel:ints stride:ints=[] padding:ints=[0] ceil_mode:int=0 count_include_pad:int=1 "
   "divisor_override:int=0", "y",
   "mean of each window of x [N, C, H, W] as torch's AvgPool2d, ceil_mode, count_include_pad and "
   "divisor_override included",
   [](In in, A a, Loc loc) -> Out { return {avg_pool2d(in[0], pool_options(a), loc)}; }},
  {"batch_norm", "x weight? bias? running_mean? running_var?",
   "training:int momentum:float=0.1 eps:float=1e-5 sync_world:int=1", "y running_mean running_var",
   "batch normalization over dim 1 of [N, C, ...]; in training the running statistics' new values "
   "(when given), averaged over sync_world ranks when above 1",
   [](In in, A a, Loc loc) -> Out {
     BatchNormResult r = batch_norm_functional(in[0], in[3], in[4], in[1], in[2],
                                               a.flag("training"), a.f64("momentum"),
                                               a.f64("eps"), a.i64("sync_world"), loc);
     return {r.y, r.running_mean, r.running_var};
   }},
  {"clamp", "x", "min:float=nan max:float=nan", "y",
   "min(max(x, min), max), a bound nan when absent; gradient 1 at the bounds",
   [](In in, A a, Loc loc) -> Out { return {clamp(in[0], a.f64("min"), a.f64("max"), loc)}; }},
  {"ctc_loss", "log_probs targets input_lengths target_lengths",
   "blank:int=0 reduction:int=1 zero_infinity:int=0", "loss",
   "the connectionist temporal classification loss of log_probs [T, N, C] (log-probabilities) "
   "given targets [N, S] or concatenated and each sample's lengths; reduction 0 none (per "
   "sample), 1 mean of each divided by its target length, 2 sum",
   [](In in, A a, Loc loc) -> Out {
     return {ctc_loss(in[0], in[1], in[2], in[3], a.i64("blank"), reduction(a, "ctc_loss", loc),
                      a.flag("zero_infinity"), loc)};
   }},
  {"dropout", "x", "p:float training:int=1", "y",
   "zeroes elements with probability p (uniform draw below 1 - p keeps), scales the rest by "
   "1/(1 - p)",
   [](In in, A a, Loc loc) -> Out { return {dropout(in[0], a.f64("p"), a.flag("training"), loc)}; }},
  {"elu", "x", "alpha:float=1 scale:float=1 input_scale:float=1", "y",
   "scale x for x > 0, else scale alpha expm1(input_scale x): ELU, SELU, CELU",
   [](In in, A a, Loc loc) -> Out {
     return {elu(in[0], a.f64("alpha"), a.f64("scale"), a.f64("input_scale"), loc)};
   }},
  {"gelu", "x", "approximate:string=none", "y", "x Φ(x), exact (erf) or approximate=tanh",
   [](In in, A a, Loc loc) -> Out {
     const std::string& m = a.str("approximate");
     if (m != "none" && m != "tanh")
       throw Error(fmt::format("gelu: approximate must be none or tanh, got '{}'{}", m,
                               at(SourceLoc::from(loc))));
     return {gelu(in[0], m == "tanh", loc)};
   }},
  {"group_norm", "x weight? bias?", "groups:int eps:float=1e-5", "y",
   "x [N, C, ...] normalized over each group of channels, then weight and bias per channel",
   [](In in, A a, Loc loc) -> Out {
     return {group_norm(in[0], a.i64("groups"), in[1], in[2], a.f64("eps"), loc)};
   }},
  {"hardsigmoid", "x", "", "y", "relu6(x + 3) / 6",
   [](In in, A, Loc loc) -> Out { return {hardsigmoid(in[0], loc)}; }},
  {"hardswish", "x", "", "y", "x relu6(x + 3) / 6",
   [](In in, A, Loc loc) -> Out { return {hardswish(in[0], loc)}; }},
  {"hardtanh", "x", "min_value:float=-1 max_value:float=1", "y", "x clamped to [min_value, max_value]",
   [](In in, A a, Loc loc) -> Out {
     return {hardtanh(in[0], a.f64("min_value"), a.f64("max_value"), loc)};
   }},
  {"interpolate", "x", "sizes:ints mode:string=nearest align_corners:int=0 scales:floats=[]", "y",
   "x [N, C, spatial...] resized to sizes as torch's F.interpolate: nearest, nearest_exact, "
   "linear or cubic, "
   "align_corners as torch's, scales the scale factors given (0: none)",
   [](In in, A a, Loc loc) -> Out {
     return {interpolate(in[0], a.ints("sizes"), resize_mode(a.str("mode"), loc),
                         a.flag("align_corners"), a.floats("scales"), loc)};
   }},
  {"layer_norm", "x weight? bias?", "normalized_dims:int=1 eps:float=1e-5", "y",
   "x normalized over its last normalized_dims dims, then x weight + bias",
   [](In in, A a, Loc loc) -> Out {
     return {layer_norm(in[0], a.i64("normalized_dims"), in[1], in[2], a.f64("eps"), loc)};
   }},
  {"leaky_relu", "x", "negative_slope:float=0.01", "y", "x for x > 0, else negative_slope x",
   [](In in, A a, Loc loc) -> Out { return {leaky_relu(in[0], a.f64("negative_slope"), loc)}; }},
  {"log_sigmoid", "x", "", "y", "log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))",
   [](In in, A, Loc loc) -> Out { return {log_sigmoid(in[0], loc)}; }},
  {"log_softmax", "x", "axis:int", "y",
   "x - log(sum(exp(x))) along axis, the max subtracted first; where the max's p is above "
   "1/2, its gradient takes 1 - p as the other terms' sum (exact at a saturated softmax)",
   [](In in, A a, Loc loc) -> Out { return {log_softmax(in[0], a.i64("axis"), loc)}; }},
  {"mean", "x", "axes:ints keepdim:int=0", "y", "the sum over axes divided by their size",
   [](In in, A a, Loc loc) -> Out {
     Tensor y = mean(in[0], a.ints("axes"), loc);
     if (!a.flag("keepdim")) return {y};
     Shape s = in[0].shape();
     for (int64_t ax : a.ints("axes")) s[size_t(ax < 0 ? ax + in[0].dim() : ax)] = 1;
     return {y.reshape(s, loc)};
   }},
  {"max_pool2d", "x", "kernel:ints stride:ints=[] padding:ints=[0] dilation:ints=[1] ceil_mode:int=0",
   "y", "max of each window of x [N, C, H, W] as torch's MaxPool2d, ceil_mode and dilation "
   "included",
   [](In in, A a, Loc loc) -> Out { return {max_pool2d(in[0], pool_options(a), loc)}; }},
  {"max_pool2d_with_indices", "x",
   "kernel:ints stride:ints=[] padding:ints=[0] dilation:ints=[1] ceil_mode:int=0", "y indices",
   "max_pool2d and each kept element's position in its [H, W] plane, as torch's return_indices",
   [](In in, A a, Loc loc) -> Out {
     auto [y, indices] = max_pool2d_with_indices(in[0], pool_options(a), loc);
     return {y, indices};
   }},
  {"mish", "x", "", "y", "x tanh(softplus(x))",
   [](In in, A, Loc loc) -> Out { return {mish(in[0], loc)}; }},
  {"nll_loss", "logp labels weight?", "reduction:int=1 ignore_index:int=-100", "loss",
   "-weight[label] logp[label] per position of [N, C, d...], 0 where the label is ignore_index; "
   "reduction 0 none, 1 mean over the weights of the positions not ignored, 2 sum",
   [](In in, A a, Loc loc) -> Out {
     return {nll_loss(in[0], in[1], in[2], reduction(a, "nll_loss", loc), a.i64("ignore_index"),
                      loc)};
   }},
  {"pad", "x", "pads:ints mode:string=constant value:float=0", "y",
   "x padded as torch's F.pad: (before, after) pairs, the last dim's first; mode constant (a "
   "negative pad crops), reflect, replicate or circular",
   [](In in, A a, Loc loc) -> Out {
     return {pad(in[0], a.ints("pads"), pad_mode(a.str("mode"), loc), a.f64("value"), loc)};
   }},
  {"prelu", "x weight", "", "y", "x for x > 0, else weight x, weight one value or one per channel",
   [](In in, A, Loc loc) -> Out { return {prelu(in[0], in[1], loc)}; }},
  {"relu", "x", "", "y", "max(x, 0), NaN kept; gradient 0 at 0",
   [](In in, A, Loc loc) -> Out { return {relu(in[0], loc)}; }},
  {"silu", "x", "", "y", "x sigmoid(x)",
   [](In in, A, Loc loc) -> Out { return {silu(in[0], loc)}; }},
  {"softmax", "x", "axis:int", "y",
   "exp(x) / sum(exp(x)) along axis, the max subtracted first (no gradient through it)",
   [](In in, A a, Loc loc) -> Out { return {softmax(in[0], a.i64("axis"), loc)}; }},
  {"softplus", "x", "beta:float=1 threshold:float=20", "y",
   "log1p(exp(beta x)) / beta, x where beta x > threshold",
   [](In in, A a, Loc loc) -> Out {
     return {softplus(in[0], a.f64("beta"), a.f64("threshold"), loc)};
   }},
  {"take", "x", "dim:int index:ints", "y",
   "x's elements at positions index along dim, in that order (one gather: a flip, a slice with a "
   "step)",
   [](In in, A a, Loc loc) -> Out { return {take(in[0], a.i64("dim"), a.ints("index"), loc)}; }},
  {"var", "x", "axes:ints correction:float=1 keepdim:int=0", "y",
   "the sum of squares of x centered over axes, divided by max(their size - correction, 0); its "
   "gradient to x one value",
   [](In in, A a, Loc loc) -> Out {
     return {var(in[0], a.ints("axes"), a.f64("correction"), a.flag("keepdim"), loc)};
   }},
};
// clang-format on

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && s[i] == ' ') ++i;
    size_t j = s.find(' ', i);
    if (j == std::string_view::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

struct AttrSpec {
  std::string_view name, kind, dflt;
  bool has_default;
};

AttrSpec parse_spec(std::string_view w) {
  AttrSpec s{};
  const size_t colon = w.find(':'), eq = w.find('=');
  s.name = w.substr(0, colon);
  s.kind = w.substr(colon + 1, eq == std::string_view::npos ? w.npos : eq - colon - 1);
  s.has_default = eq != std::string_view::npos;
  if (s.has_default) s.dflt = w.substr(eq + 1);
  return s;
}

ir::AttrValue default_value(const AttrSpec& s) {
  const std::string d(s.dflt);
  if (s.kind == "int") return int64_t(std::stoll(d));
  if (s.kind == "float") return std::stod(d);
  if (s.kind == "string") return d;
  if (s.kind == "floats") {
    WS_CHECK(d == "[]") << "a floats attribute's default is []";
    return std::vector<double>{};
  }
  std::vector<int64_t> v;  // ints: [a,b] or []
  std::stringstream in(d.substr(1, d.size() - 2));
  for (std::string part; std::getline(in, part, ',');) v.push_back(std::stoll(part));
  return v;
}

bool kind_matches(std::string_view kind, const ir::AttrValue& v) {
  if (kind == "int") return std::holds_alternative<int64_t>(v);
  if (kind == "float") return is_floating_kind(v);
  if (kind == "string") return std::holds_alternative<std::string>(v);
  if (kind == "floats")  // a list of whole numbers arrives as ints
    return std::holds_alternative<std::vector<double>>(v) ||
           std::holds_alternative<std::vector<int64_t>>(v);
  return std::holds_alternative<std::vector<int64_t>>(v);
}

const ir::AttrValue& find(const CompositeAttrs& a, std::string_view name) {
  auto it = a.values.find(name);
  WS_CHECK(it != a.values.end()) << "composite " << a.composite << " reads attribute " << name
                                 << ", not in its schema";
  return it->second;
}

}  // namespace

double CompositeAttrs::f64(std::string_view name) const {
  const ir::AttrValue& v = find(*this, name);
  return std::holds_alternative<double>(v) ? std::get<double>(v) : double(std::get<int64_t>(v));
}
int64_t CompositeAttrs::i64(std::string_view name) const {
  return std::get<int64_t>(find(*this, name));
}
const std::vector<int64_t>& CompositeAttrs::ints(std::string_view name) const {
  return std::get<std::vector<int64_t>>(find(*this, name));
}
std::vector<double> CompositeAttrs::floats(std::string_view name) const {
  const ir::AttrValue& v = find(*this, name);
  if (const auto* d = std::get_if<std::vector<double>>(&v)) return *d;
  const auto& i = std::get<std::vector<int64_t>>(v);
  return std::vector<double>(i.begin(), i.end());
}
const std::string& CompositeAttrs::str(std::string_view name) const {
  return std::get<std::string>(find(*this, name));
}

std::span<const Composite> composites() { return kTable; }

std::vector<Tensor> call_composite(std::string_view name, std::span<const Tensor> operands,
                                   const std::map<std::string, ir::AttrValue>& attrs, Loc loc) {
  const SourceLoc sl = SourceLoc::from(loc);
  auto it = std::find_if(std::begin(kTable), std::end(kTable),
                         [&](const Composite& c) { return c.name == name; });
  if (it == std::end(kTable))
    throw Error(fmt::format("there is no composite op '{}'{}", name, at(sl)));
  const Composite& c = *it;
  const std::vector<std::string_view> names = words(c.operands);
  if (operands.size() != names.size())
    throw Error(fmt::format("{}: {} operands given, it takes {} ({}){}", name, operands.size(),
                            names.size(), c.operands, at(sl)));
  for (size_t i = 0; i < names.size(); ++i)
    if (!operands[i].defined() && !names[i].ends_with('?'))
      throw Error(fmt::format("{}: operand {} is required{}", name, names[i], at(sl)));
  CompositeAttrs a;
  a.composite = c.name;
  std::vector<AttrSpec> specs;
  for (std::string_view w : words(c.attrs)) specs.push_back(parse_spec(w));
  for (const auto& [key, value] : attrs) {
    auto spec =
        std::find_if(specs.begin(), specs.end(), [&](const AttrSpec& s) { return s.name == key; });
    if (spec == specs.end())
      throw Error(fmt::format("{}: no attribute '{}' (its attributes: {}){}", name, key,
                              c.attrs.empty() ? "none" : c.attrs, at(sl)));
    if (!kind_matches(spec->kind, value))
      throw Error(
          fmt::format("{}: attribute '{}' must be of kind {}{}", name, key, spec->kind, at(sl)));
    a.values.emplace(key, value);
  }
  for (const AttrSpec& s : specs)
    if (!a.values.contains(s.name)) {
      if (!s.has_default)
        throw Error(
            fmt::format("{}: attribute '{}' ({}) is required{}", name, s.name, s.kind, at(sl)));
      a.values.emplace(std::string(s.name), default_value(s));
    }
  return c.fn(operands, a, loc);
}

}  // namespace ws::nn
