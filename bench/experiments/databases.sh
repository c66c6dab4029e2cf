# Sourced by the experiment scripts (not run on its own): throwaway databases on
# the server of DATABASE_URL. Needs `here` set to the repository root.
#   admin ARGS...       psql on DATABASE_URL, stopping at the first error
#   db_url NAME         the URL of database NAME on the same server
#   ceiling_db NAME     a fresh database with the ceiling's schema (../shared/bench)
#   lq_db NAME          a fresh database migrated to litequeue's schema
#   drop_dbs NAME...    drops them (for an EXIT trap)
#   pgbench_insert URL SECS   pgbench's one-client single-row insert (enqueue_1.sql), tx/s
bench_dir=${LQ_CEILING_DIR:-$here/../shared/bench}
admin() { psql -qX "$DATABASE_URL" -v ON_ERROR_STOP=1 "$@"; }
db_url() { echo "${DATABASE_URL%/*}/$1"; }
fresh_db() { admin -c "drop database if exists $1 with (force)" -c "create database $1" 2>/dev/null; }
drop_dbs() { for db in "$@"; do admin -c "drop database if exists $db with (force)"; done; }
ceiling_db() {
  fresh_db "$1"
  psql -qX "$(db_url "$1")" -v ON_ERROR_STOP=1 -f "$bench_dir/schema.sql" >/dev/null 2>&1
}
lq_db() {
  fresh_db "$1"
  local migrations=()
  for f in "$here"/migrations/*.sql; do migrations+=(-f "$f"); done
  # migrate() creates the version table before the first migration
  # (lq-core/src/db/migration.rs); from version 10 on the migrations read it.
  psql -qX "$(db_url "$1")" -v ON_ERROR_STOP=1 -c "create schema lq" \
    -c "create table lq.schema_migrations (version integer primary key, name text not null, applied_at timestamptz not null default now())" \
    "${migrations[@]}" >/dev/null 2>&1
}
pgbench_insert() {
  pgbench "$1" -n -M prepared -c 1 -T "$2" -f "$bench_dir/enqueue_1.sql" 2>&1 |
    sed -n 's/^tps = \([0-9]*\).*/\1/p'
}
