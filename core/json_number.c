#include "core/json_number.h"

#include <math.h>
#include <string.h>

json_t *tb_json_number(double v) {
    if (isnan(v)) return json_string("NaN");
    if (isinf(v)) return json_string(v > 0 ? "Infinity" : "-Infinity");
    return json_real(v);
}

int tb_json_number_value(const json_t *v, double *out) {
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return 1;
    }
    const char *s = json_string_value(v);
    if (!s) return 0;
    if (!strcmp(s, "NaN")) *out = NAN;
    else if (!strcmp(s, "Infinity")) *out = INFINITY;
    else if (!strcmp(s, "-Infinity")) *out = -INFINITY;
    else return 0;
    return 1;
}
