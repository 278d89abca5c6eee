/* src/ops/op_table.h — the op table (gdl__ops), made from GDL_OP_LIST. */
/* ---- the op table, made from the op list (GDL_OP_LIST), by gdl_op ---- */
#define GDL__OP_ROW(id, name, backward, kernel, autocast) {name, backward, kernel, autocast},
static const gdl__op_info gdl__ops[GDL_OP_COUNT] = {GDL_OP_LIST(GDL__OP_ROW)};
#undef GDL__OP_ROW
static const gdl__op_info *gdl__op(int op) { return &gdl__ops[op]; }
