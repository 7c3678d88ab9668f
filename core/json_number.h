// json_number.h — numbers in the project's JSON files, non-finite ones included.
//
// JSON has no NaN or Infinity (jansson's json_real refuses them, and a json_pack holding
// one fails whole — a metrics line would be lost). Every writer of a number that may not
// be finite (a loss, a gradient norm, a rate) writes it with tb_json_number: a finite value
// as a JSON number, the others as the strings "NaN", "Infinity" and "-Infinity" (the names
// JavaScript and Python print). Every reader takes numbers through tb_json_number_value,
// which reads those strings back as the values they name, so nothing is dropped.
#ifndef TB_CORE_JSON_NUMBER_H
#define TB_CORE_JSON_NUMBER_H

#include <jansson.h>

json_t *tb_json_number(double v);
// 1 with *out set when v is a JSON number or one of the three strings; else 0.
int tb_json_number_value(const json_t *v, double *out);

#endif
