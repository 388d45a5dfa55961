/* cmd/costmodel.h -- what the files of moe-costmodel share: the program name, the topology
 * lookup (file or preset name) and the subcommand entry points defined outside
 * cmd/moe-costmodel.c. */
#ifndef MOE_CMD_COSTMODEL_H
#define MOE_CMD_COSTMODEL_H

#include "moe/topo.h"

/* "moe-costmodel", for messages. */
extern const char *const costmodel_prog;

/* Read the topology `arg`: a moe-topology(5) file, or the name of a preset (with or without
 * ".topo") looked up in $MOEFLOW_TOPOLOGIES and then in the installed topologies directory.
 * Returns 0, or 1 after printing "moe-costmodel: ..." on stderr. */
int costmodel_topology(const char *arg, moe_topo_t *t);

#endif
