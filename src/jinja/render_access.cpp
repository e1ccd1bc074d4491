// Interpreter of ft::jinja: attribute and item access (x.name, x[key], slices) under the sandbox's rules.
#include "jinja/render.h"

namespace ft::jinja::detail {

Val Renderer::getattr(const Val& obj, const std::string& name, int line) {
  switch (obj.kind) {
    case Kind::Undefined:
      fail(line, obj.s + " (UndefinedError)");
    case Kind::Map: {
      if (has_method(obj, name) || is_unsafe_method(obj, name)) break;
      for (const auto& [k, v] : *obj.dict)
        if (k == name) return v;
      return Val::undef("'dict object' has no attribute '" + name + "'");
    }
    case Kind::Namespace: {
      for (const auto& [k, v] : obj.ns->attrs)
        if (k == name) return v;
      return Val::undef("'Namespace object' has no attribute '" + name + "'");
    }
    case Kind::Loop: {
      const LoopInfo& L = *obj.loop;
      auto n = static_cast<int64_t>(L.items->size());
      auto i = static_cast<int64_t>(L.index0);
      if (name == "index") return Val::integer(i + 1);
      if (name == "index0") return Val::integer(i);
      if (name == "revindex") return Val::integer(n - i);
      if (name == "revindex0") return Val::integer(n - i - 1);
      if (name == "first") return Val::boolean(i == 0);
      if (name == "last") return Val::boolean(i == n - 1);
      if (name == "length") return Val::integer(n);
      if (name == "depth") return Val::integer(1);
      if (name == "depth0") return Val::integer(0);
      if (name == "previtem")
        return i > 0 ? (*L.items)[static_cast<size_t>(i - 1)] : Val::undef("there is no previous item");
      if (name == "nextitem")
        return i + 1 < n ? (*L.items)[static_cast<size_t>(i + 1)] : Val::undef("there is no next item");
      break;
    }
    default:
      break;
  }
  if (is_unsafe_method(obj, name)) {
    Val u = Val::undef(std::string("access to attribute '") + name + "' of '" + type_name(obj) + "' object is unsafe.");
    u.flags = kUnsafe;
    return u;
  }
  if (has_method(obj, name)) {
    auto c = std::make_shared<Callable>();
    c->name = name;
    Val self = obj;
    std::string mname = name;
    c->fn = [self, mname](Renderer& r, CallArgs& args, int l) { return call_method(r, self, mname, args, l); };
    Val v;
    v.kind = Kind::Callable;
    v.fn = std::move(c);
    return v;
  }
  std::string tn = obj.kind == Kind::None ? "None" : std::string(type_name(obj)) + " object";
  return Val::undef("'" + tn + "' has no attribute '" + name + "'");
}

static int64_t slice_index(const Val& v, const char* what) {
  if (v.is_intlike()) return v.as_int();
  throw TypeErr(std::string("slice ") + what + " must be an integer or None");
}

Val Renderer::getitem(const Val& obj, const Val& key, int line) {
  if (obj.kind == Kind::Undefined) fail(line, obj.s + " (UndefinedError)");
  if (key.kind == Kind::Seq && (key.flags & kTuple) && key.list->size() == 3 && key.s == "<slice>") {
    // slice
    if (obj.kind != Kind::String && !(obj.kind == Kind::Seq && !(obj.flags & kGen)))
      throw TypeErr(std::string("'") + type_name(obj) + "' object is not subscriptable");
    const Val& a = (*key.list)[0];
    const Val& b = (*key.list)[1];
    const Val& c = (*key.list)[2];
    int64_t stepv = c.kind == Kind::None ? 1 : slice_index(c, "step");
    if (stepv == 0) throw TypeErr("slice step cannot be zero");
    bool ascii = obj.kind == Kind::String && is_ascii(obj.s);
    std::u32string u;
    if (obj.kind == Kind::String && !ascii) u = utf8_decode(obj.s);
    auto len = static_cast<int64_t>(obj.kind == Kind::String ? (ascii ? obj.s.size() : u.size()) : obj.list->size());
    int64_t lower = stepv < 0 ? -1 : 0;
    int64_t upper = stepv < 0 ? len - 1 : len;
    auto norm = [&](const Val& x, int64_t dflt) {
      if (x.kind == Kind::None) return dflt;
      int64_t v = slice_index(x, "indices");
      if (v < 0) {
        v += len;
        if (v < lower) v = lower;
      } else if (v > upper) {
        v = upper;
      }
      return v;
    };
    int64_t start = norm(a, stepv < 0 ? upper : lower);
    int64_t stop = norm(b, stepv < 0 ? lower : upper);
    std::vector<size_t> idx;
    for (int64_t i = start; stepv > 0 ? i < stop : i > stop; i += stepv) idx.push_back(static_cast<size_t>(i));
    if (obj.kind == Kind::String) {
      std::string out;
      for (size_t i : idx) {
        if (ascii)
          out += obj.s[i];
        else
          append_utf8(out, u[i]);
      }
      return Val::str(std::move(out));
    }
    List out;
    for (size_t i : idx) out.push_back((*obj.list)[i]);
    return Val::make_list(std::move(out), obj.flags & kTuple);
  }
  switch (obj.kind) {
    case Kind::Map:
      if (key.is_str()) {
        for (const auto& [k, v] : *obj.dict)
          if (k == key.s) return v;
        return getattr(obj, key.s, line).kind == Kind::Callable
                   ? getattr(obj, key.s, line)
                   : Val::undef("'dict object' has no attribute '" + key.s + "'");
      }
      return Val::undef("'dict object' has no element " + to_repr(key));
    case Kind::Seq:
    case Kind::String: {
      if (key.is_str()) return getattr(obj, key.s, line);
      if (obj.kind == Kind::Seq && (obj.flags & kGen)) throw TypeErr("'generator' object is not subscriptable");
      if (!key.is_intlike())
        return Val::undef(std::string("'") + type_name(obj) + " object' has no element " + to_repr(key));
      int64_t i = key.as_int();
      if (obj.kind == Kind::Seq) {
        auto n = static_cast<int64_t>(obj.list->size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Val::undef("list object has no element " + std::to_string(key.as_int()));
        return (*obj.list)[static_cast<size_t>(i)];
      }
      if (is_ascii(obj.s)) {
        auto n = static_cast<int64_t>(obj.s.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Val::undef("str object has no element " + std::to_string(key.as_int()));
        return Val::str(std::string(1, obj.s[static_cast<size_t>(i)]));
      }
      std::u32string u = utf8_decode(obj.s);
      auto n = static_cast<int64_t>(u.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Val::undef("str object has no element " + std::to_string(key.as_int()));
      std::string out;
      append_utf8(out, u[static_cast<size_t>(i)]);
      return Val::str(std::move(out));
    }
    default:
      if (key.is_str()) return getattr(obj, key.s, line);
      return Val::undef(std::string("'") + type_name(obj) + " object' has no element " + to_repr(key));
  }
}

}  // namespace ft::jinja::detail
