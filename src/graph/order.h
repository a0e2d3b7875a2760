/*
 * order.h — the compute order shared by the executor and the CPU reference
 * evaluator (graph.c).
 */
#ifndef GLESC_GRAPH_ORDER_H
#define GLESC_GRAPH_ORDER_H

#include "graph/graph.h"

typedef struct graph_order_t {
    glesc_tensor **nodes; /* sources before consumers; nodes[i]->order == i */
    int n;
} graph_order_t;

/* Orders what outs[0..n) need (every tensor reached, leaves included). */
glesc_status graph_order(glesc_graph *g, glesc_tensor *const *outs, int n, graph_order_t *o);
void graph_order_free(graph_order_t *o);
/* Gives back the memory of the last compute's outputs. */
void graph_release_kept(glesc_graph *g);

#endif /* GLESC_GRAPH_ORDER_H */
