// jinja2's filters in ft::jinja (internal): every implementation, for the table in filters.cpp. f_x is jinja2's
// filter x; its arguments are jinja2's, by position or keyword.
#pragma once

#include "jinja/render.h"

namespace ft::jinja::detail {

// On sequences and mappings (filters_seq.cpp).
Val f_length(Renderer&, const Val& v, CallArgs&, int);               // length, count
Val f_first(Renderer&, const Val& v, CallArgs&, int);                // first
Val f_last(Renderer&, const Val& v, CallArgs&, int);                 // last
Val f_join(Renderer& r, const Val& v, CallArgs& a, int line);        // join(d, attribute)
Val f_default(Renderer&, const Val& v, CallArgs& a, int);            // default, d (default_value, boolean)
Val f_list(Renderer&, const Val& v, CallArgs&, int);                 // list
Val f_reverse(Renderer&, const Val& v, CallArgs&, int);              // reverse
Val f_sort(Renderer& r, const Val& v, CallArgs& a, int line);        // sort(reverse, case_sensitive, attribute)
Val f_unique(Renderer& r, const Val& v, CallArgs& a, int line);      // unique(case_sensitive, attribute)
Val f_min(Renderer& r, const Val& v, CallArgs& a, int line);         // min(case_sensitive, attribute)
Val f_max(Renderer& r, const Val& v, CallArgs& a, int line);         // max(case_sensitive, attribute)
Val f_sum(Renderer& r, const Val& v, CallArgs& a, int line);         // sum(attribute, start)
Val f_items(Renderer&, const Val& v, CallArgs&, int);                // items
Val f_dictsort(Renderer&, const Val& v, CallArgs& a, int);           // dictsort(case_sensitive, by, reverse)
Val f_map(Renderer& r, const Val& v, CallArgs& a, int line);         // map(filter, ...) or map(attribute=, default=)
Val f_select(Renderer& r, const Val& v, CallArgs& a, int line);      // select(test, ...)
Val f_reject(Renderer& r, const Val& v, CallArgs& a, int line);      // reject(test, ...)
Val f_selectattr(Renderer& r, const Val& v, CallArgs& a, int line);  // selectattr(attribute, test, ...)
Val f_rejectattr(Renderer& r, const Val& v, CallArgs& a, int line);  // rejectattr(attribute, test, ...)

// On strings and numbers (filters_text.cpp).
Val f_trim(Renderer&, const Val& v, CallArgs& a, int);       // trim(chars)
Val f_upper(Renderer&, const Val& v, CallArgs&, int);        // upper
Val f_lower(Renderer&, const Val& v, CallArgs&, int);        // lower
Val f_capitalize(Renderer&, const Val& v, CallArgs&, int);   // capitalize
Val f_title(Renderer&, const Val& v, CallArgs&, int);        // title
Val f_string(Renderer&, const Val& v, CallArgs&, int);       // string (keeps Markup)
Val f_safe(Renderer&, const Val& v, CallArgs&, int);         // safe
Val f_escape(Renderer&, const Val& v, CallArgs&, int);       // escape, e
Val f_forceescape(Renderer&, const Val& v, CallArgs&, int);  // forceescape
Val f_replace(Renderer&, const Val& v, CallArgs& a, int);    // replace(old, new, count)
Val f_int(Renderer&, const Val& v, CallArgs& a, int);        // int(default, base)
Val f_float(Renderer&, const Val& v, CallArgs& a, int);      // float(default)
Val f_abs(Renderer&, const Val& v, CallArgs&, int);          // abs
Val f_round(Renderer&, const Val& v, CallArgs& a, int);      // round(precision, method)
Val f_tojson(Renderer& r, const Val& v, CallArgs& a, int);   // tojson as transformers defines it
Val f_indent(Renderer& r, const Val& v, CallArgs& a, int);   // indent(width, first, blank)
Val f_wordcount(Renderer&, const Val& v, CallArgs&, int);    // wordcount
Val f_format(Renderer& r, const Val& v, CallArgs& a, int);   // format (%-formatting)
Val f_center(Renderer& r, const Val& v, CallArgs& a, int);   // center(width)

}  // namespace ft::jinja::detail
