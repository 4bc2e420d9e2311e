//! InputMessage's input data: the game actions of §6.1 and the ones defined here, with
//! their tile and rectangle lists.

use super::*;

/// InputMessage input types (§6.1).
pub const INPUT_NONE: u8 = 0x00;
pub const INPUT_PLACE_BUILDING: u8 = 0x01;
pub const INPUT_DESIGNATE_ZONE: u8 = 0x02;
pub const INPUT_DEMOLISH: u8 = 0x03;
pub const INPUT_PURCHASE_TILE: u8 = 0x04;
pub const INPUT_SET_TRIBUTE_RATE: u8 = 0x05;
pub const INPUT_PLACE_ROAD: u8 = 0x06;
pub const INPUT_PLACE_CONDUIT: u8 = 0x07;
pub const INPUT_PLACE_PIPE: u8 = 0x08;
pub const INPUT_CANCEL_ACTION: u8 = 0x09;

/// A grid rectangle of DesignateZone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GridRect {
    pub x: i32,
    pub y: i32,
    pub width: u32,
    pub height: u32,
}

/// A list of `count` fixed-size records, validated once, iterated on demand (no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Records<'a> {
    pub(super) bytes: &'a [u8],
}

impl<'a> Records<'a> {
    pub fn len_in(&self, record: usize) -> usize {
        self.bytes.len() / record.max(1)
    }

    /// Grid tiles `(x, y)`.
    pub fn tiles(&self) -> impl Iterator<Item = (i32, i32)> + 'a {
        self.bytes.chunks_exact(8).map(|c| {
            let mut r = Reader::<Le>::new(c);
            (r.i32().unwrap_or(0), r.i32().unwrap_or(0))
        })
    }

    pub fn rects(&self) -> impl Iterator<Item = GridRect> + 'a {
        self.bytes.chunks_exact(16).map(|c| {
            let mut r = Reader::<Le>::new(c);
            GridRect {
                x: r.i32().unwrap_or(0),
                y: r.i32().unwrap_or(0),
                width: r.u32().unwrap_or(0),
                height: r.u32().unwrap_or(0),
            }
        })
    }
}

/// Typed input data, borrowed from the message (decoding) or the caller (encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action<'a> {
    None,
    PlaceBuilding {
        building_type: u32,
        x: i32,
        y: i32,
        rotation: u8,
    },
    DesignateZone {
        zone_type: u8,
        density: u8,
        rects: &'a [GridRect],
    },
    /// A zone as decoded (records borrowed from the wire).
    DesignateZoneWire {
        zone_type: u8,
        density: u8,
        rects: Records<'a>,
    },
    /// Demolish, PlaceRoad, PlaceConduit, PlacePipe: `kind` is the input type.
    Tiles {
        kind: u8,
        tiles: &'a [(i32, i32)],
    },
    TilesWire {
        kind: u8,
        tiles: Records<'a>,
    },
    PurchaseTile {
        x: i32,
        y: i32,
    },
    /// `zone_type` as DesignateZone's (0 = every zone, 1-3 one), `rate` in percent.
    SetTributeRate {
        zone_type: u8,
        rate: u8,
    },
    CancelAction {
        input_sequence: u32,
    },
}

impl Action<'_> {
    pub fn input_type(&self) -> u8 {
        match self {
            Action::None => INPUT_NONE,
            Action::PlaceBuilding { .. } => INPUT_PLACE_BUILDING,
            Action::DesignateZone { .. } | Action::DesignateZoneWire { .. } => INPUT_DESIGNATE_ZONE,
            Action::Tiles { kind, .. } | Action::TilesWire { kind, .. } => *kind,
            Action::PurchaseTile { .. } => INPUT_PURCHASE_TILE,
            Action::SetTributeRate { .. } => INPUT_SET_TRIBUTE_RATE,
            Action::CancelAction { .. } => INPUT_CANCEL_ACTION,
        }
    }

    /// Counter names (`action.<name>`).
    pub fn name(&self) -> &'static str {
        match self.input_type() {
            INPUT_NONE => "none",
            INPUT_PLACE_BUILDING => "place_building",
            INPUT_DESIGNATE_ZONE => "designate_zone",
            INPUT_DEMOLISH => "demolish",
            INPUT_PURCHASE_TILE => "purchase_tile",
            INPUT_SET_TRIBUTE_RATE => "set_tribute_rate",
            INPUT_PLACE_ROAD => "place_road",
            INPUT_PLACE_CONDUIT => "place_conduit",
            INPUT_PLACE_PIPE => "place_pipe",
            _ => "cancel_action",
        }
    }

    pub(super) fn write(&self, w: &mut Writer<'_, Le>) -> Result<(), EncodeError> {
        match self {
            Action::None => {}
            Action::PlaceBuilding {
                building_type,
                x,
                y,
                rotation,
            } => {
                w.u32(*building_type)?;
                w.i32(*x)?;
                w.i32(*y)?;
                w.u8(*rotation)?;
            }
            Action::DesignateZone {
                zone_type,
                density,
                rects,
            } => {
                w.u8(*zone_type)?;
                w.u8(*density)?;
                w.u16(u16::try_from(rects.len()).map_err(|_| EncodeError::FieldTooLong)?)?;
                for r in rects.iter() {
                    w.i32(r.x)?;
                    w.i32(r.y)?;
                    w.u32(r.width)?;
                    w.u32(r.height)?;
                }
            }
            Action::DesignateZoneWire {
                zone_type,
                density,
                rects,
            } => {
                w.u8(*zone_type)?;
                w.u8(*density)?;
                w.u16(rects.len_in(16) as u16)?;
                w.bytes(rects.bytes)?;
            }
            Action::Tiles { tiles, .. } => {
                w.u16(u16::try_from(tiles.len()).map_err(|_| EncodeError::FieldTooLong)?)?;
                for (x, y) in tiles.iter() {
                    w.i32(*x)?;
                    w.i32(*y)?;
                }
            }
            Action::TilesWire { tiles, .. } => {
                w.u16(tiles.len_in(8) as u16)?;
                w.bytes(tiles.bytes)?;
            }
            Action::PurchaseTile { x, y } => {
                w.i32(*x)?;
                w.i32(*y)?;
            }
            Action::SetTributeRate { zone_type, rate } => {
                w.u8(*zone_type)?;
                w.u8(*rate)?;
            }
            Action::CancelAction { input_sequence } => w.u32(*input_sequence)?,
        }
        Ok(())
    }

    pub(super) fn read<'a>(ty: u8, r: &mut Reader<'a, Le>) -> Result<Action<'a>, &'static str> {
        let a = match ty {
            INPUT_NONE => Action::None,
            INPUT_PLACE_BUILDING => {
                let building_type = r.u32()?;
                let x = r.i32()?;
                let y = r.i32()?;
                let rotation = r.u8()?;
                if rotation > 3 {
                    return Err("bad_value");
                }
                Action::PlaceBuilding {
                    building_type,
                    x,
                    y,
                    rotation,
                }
            }
            INPUT_DESIGNATE_ZONE => {
                let zone_type = r.u8()?;
                let density = r.u8()?;
                if zone_type > 3 || density > 1 {
                    return Err("bad_value");
                }
                let n = usize::from(r.u16()?);
                if r.remaining() != n * 16 {
                    return Err("count_mismatch");
                }
                Action::DesignateZoneWire {
                    zone_type,
                    density,
                    rects: Records {
                        bytes: r.take(n * 16)?,
                    },
                }
            }
            INPUT_DEMOLISH | INPUT_PLACE_ROAD | INPUT_PLACE_CONDUIT | INPUT_PLACE_PIPE => {
                let n = usize::from(r.u16()?);
                if r.remaining() != n * 8 {
                    return Err("count_mismatch");
                }
                Action::TilesWire {
                    kind: ty,
                    tiles: Records {
                        bytes: r.take(n * 8)?,
                    },
                }
            }
            INPUT_PURCHASE_TILE => Action::PurchaseTile {
                x: r.i32()?,
                y: r.i32()?,
            },
            INPUT_SET_TRIBUTE_RATE => {
                let zone_type = r.u8()?;
                if zone_type > 3 {
                    return Err("bad_value");
                }
                Action::SetTributeRate {
                    zone_type,
                    rate: r.u8()?,
                }
            }
            INPUT_CANCEL_ACTION => Action::CancelAction {
                input_sequence: r.u32()?,
            },
            _ => return Err("unknown_input_type"),
        };
        r.expect_end()?;
        Ok(a)
    }
}
