/* The intrusive, circular, doubly linked list the real backends keep their
 * live handles on (buffers, events, streams, host registrations), so that
 * destroy can find and free whatever a caller did not release. A head is a
 * node linked to itself; a node is embedded in its handle. Header only. */
#ifndef FOUNDRY_BACKENDS_HANDLE_LIST_H
#define FOUNDRY_BACKENDS_HANDLE_LIST_H

typedef struct fdy_list_node {
  struct fdy_list_node *prev, *next;
} fdy_list_node;

/* Makes head an empty list. */
static inline void fdy_list_init(fdy_list_node *head) {
  head->prev = head;
  head->next = head;
}

/* Appends node (not on any list) at the tail of head. */
static inline void fdy_list_push(fdy_list_node *head, fdy_list_node *node) {
  node->prev = head->prev;
  node->next = head;
  head->prev->next = node;
  head->prev = node;
}

/* Removes node from its list and leaves it linked to itself, so a second
 * unlink is harmless. */
static inline void fdy_list_unlink(fdy_list_node *node) {
  node->prev->next = node->next;
  node->next->prev = node->prev;
  node->prev = node;
  node->next = node;
}

#endif
